"""Findings (c) and (d), the Figure 2 curves, tested as fixed in advance (docs/study.md):
(c) the slope of accuracy over k = 0..n_layer blocks transferred (n_layer x beta), (d) a
zero-shot composite with declared weights: final score above random AND a positive slope over
log(step) after warm-up. "The LSTM is more variable" is exploratory: no verdict."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpt1 import names, stats
from gpt1.config import Params
from gpt1.records import Metrics
from gpt1.report.contrasts import (
    Preds,
    Term,
    arm_flags,
    component_term,
    read_predictions,
    run_contrast,
    run_text,
)
from gpt1.report.estimates import (
    FLAGGED,
    NO_CI,
    Finding,
    ci_pts,
    component,
    conditional,
    design,
    final_verdict,
    hierarchical_mean,
    pretrain_text,
    pts,
    run_points,
)
from gpt1.report.figure2 import MODEL_LABELS, ZsPreds, scored_key, zeroshot_predictions
from gpt1.report.runs import layer_results

PAPER_LAYER_TASKS = ("mnli", "race")


def layers_finding(params: Params, metrics: Metrics,
                   left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> Finding:
    """(c): n_layer x the least-squares slope of scored-split accuracy over k, mean over the
    layer tasks; superiority (CI above 0, same sign in every pre-training seed)."""
    claim = "paper: \"accuracy rises with blocks transferred\" (Figure 2 left)"
    ks = sorted(params.layers.layers_transferred)
    recs = {t: {k: r for k in ks if (r := layer_results(metrics, t, k)) is not None}
            for t in params.layers.tasks}
    tasks = [t for t, by_k in recs.items() if len(by_k) == len(ks)]
    if len(ks) < 2 or not tasks:
        line = f"- **(c) {claim}: inconclusive** — fewer than two transfer points."
        return Finding("c", claim, "inconclusive", "n/a", "n/a", "n/a", "", line)
    n_layer = params.model.n_layer
    w = n_layer * stats.slope_weights(ks)
    flat = [(t, k, wk / len(tasks)) for t in tasks for k, wk in zip(ks, w, strict=True)]
    points: dict[tuple[int, int], float] = {}
    for t, k, wk in flat:
        m = recs[t][k]
        for run, v in run_points([m], [wk], [f"{t}.{scored_key(m)}"]).items():
            points[run] = points.get(run, 0.0) + v
    est, per = hierarchical_mean(points)
    terms = []
    for t, k, wk in flat:
        m = recs[t][k]
        runs = read_predictions(m, "test" if "test" in m.get("predictions", {}) else "dev")
        if runs is not None:
            terms.append(component_term(runs, component(t), wk))
    b = run_contrast(terms, params) if len(terms) == len(flat) else None
    sd = params.report.design_sd
    n_pre, n_ft = design(points)
    n_eval = float(np.mean([recs[t][ks[0]].get("n_eval", 0) or 1 for t in tasks]))
    var_point = stats.design_variance(sd.pretrain, sd.seed,
                                      math.sqrt(sd.accuracy * (1 - sd.accuracy)),
                                      max(n_pre, 1), max(n_ft, 1), n_eval, len(tasks))
    centred = np.asarray(ks, float) - np.mean(ks)
    mde = stats.mde(var_point.scaled(n_layer / math.sqrt(float(centred @ centred))),
                    params.report.power)
    test_word = NO_CI if b is None else stats.superiority(b)
    flagged, counts = k_flags(params, recs, tasks, ks)
    verdict = final_verdict(test_word, flagged)
    deviation = ("" if tuple(tasks) == PAPER_LAYER_TASKS else
                 f" Tested on {', '.join(t.upper() for t in tasks)}, a deviation from the "
                 "paper's MNLI and RACE (chosen where the model learns; docs/study.md).")
    ci = "n/a" if b is None else conditional(f"95 % CI {ci_pts(b.ci)}", n_pre)
    line = (f"- **(c) {claim}: {verdict}.** {n_layer} x slope of accuracy over k = "
            f"{', '.join(map(str, ks))} blocks, mean over {', '.join(t.upper() for t in tasks)} "
            f"= {pts(est)} points over {len(points)} runs ({pretrain_text(per, b)}), "
            f"{ci if b is not None else NO_CI}. Test: superiority of the slope (held = 95 % CI "
            "above 0 and the same sign in every pre-training seed); margin: none; hierarchical "
            "bootstrap, examples shared by every k and run. MDE "
            f"({100 * params.report.power:.0f} % power): {100 * mde:.1f} points over "
            f"{n_layer} blocks.{deviation}")
    line += (" Gate: the k arms have no pilot, not gated. Runs and flags (a run is degenerate "
             f"at ≥ {100 * params.report.degenerate_frac:.0f} % one class; an arm is flagged "
             "when half its runs are or its CI does not clear majority): "
             f"{counts}"
             + (f"; flagged: {flagged}" if flagged else "; no k arm flagged") + ".")
    if verdict == FLAGGED:
        line += (f" The test alone says {test_word}; a slope through a flagged (non-learning) "
                 "arm is inconclusive.")
    return Finding("c", claim, verdict, f"{pts(est)} pts", ci, f"{100 * mde:.1f} points",
                   flagged, line)


def k_flags(params: Params, recs: Mapping[str, Mapping[int, Mapping[str, Any]]],
            tasks: Sequence[str], ks: Sequence[int]) -> tuple[str, str]:
    """(`k = <k> on <TASK>: reasons` of each transfer point (an arm of (c)) that is flagged,
    `k = <k> on <TASK>: <degenerate runs>` of every one)."""
    flagged, counts = [], []
    for t in tasks:
        for k in ks:
            m = recs[t][k]
            runs = read_predictions(m, "test" if "test" in m.get("predictions", {}) else "dev")
            counts.append(f"k = {k} on {t.upper()}: {run_text({t: dict(m)}, t, runs, params)}")
            flags = arm_flags({t: dict(m)}, f"{t}.{scored_key(m)}", runs, params)
            if flags:
                flagged.append(f"k = {k} on {t.upper()}: {'; '.join(flags)}")
    return "; ".join(flagged), "; ".join(counts)


def _zs_records(metrics: Metrics, model: str) -> list[dict[str, Any]]:
    return sorted((m for stem, m in sorted(metrics.items())
                   if stem.startswith("zeroshot") and names.record_body(m) == model
                   and "checkpoints" in m), key=lambda m: int(m.get("pretrain_seed", 0)))


def _weights(params: Params, m: Mapping[str, Any]) -> dict[str, float]:
    """The declared composite weights of the tasks this record scored, normalised."""
    scored = set(m["checkpoints"][0]["normalised"]) if m["checkpoints"] else set()
    w = {t: v for t, v in params.report.zeroshot_weights.items() if t in scored}
    total = sum(w.values())
    return {t: v / total for t, v in w.items()} if total else {}


def _composite_curve(params: Params, m: Mapping[str, Any]) -> list[tuple[int, float]]:
    w = _weights(params, m)
    return [(int(c["step"]), sum(w[t] * float(c["normalised"][t]) for t in w))
            for c in sorted(m["checkpoints"], key=lambda c: c["step"])]


def _zs_preds(label: np.ndarray, prediction: np.ndarray) -> Preds:
    """One run's zero-shot predictions on a task at a step (examples in file order)."""
    return Preds(np.arange(len(label)), label, prediction, np.full(len(label), ""))


def _zs_contrast(params: Params, recs: Sequence[Mapping[str, Any]],
                 step_weights: Mapping[int, float]) -> stats.RunBootstrap | None:
    """Bootstrap of sum over steps of weight x composite(step), one run per pre-training seed:
    one term per task and step holding every seed's run (the seeds share their examples), so
    the contrast resamples the pre-training seeds and the examples together."""
    if not recs:
        return None
    runs: dict[tuple[int, int], ZsPreds] = {}
    for m in recs:
        preds = zeroshot_predictions(m)
        if preds is None:
            return None
        runs[(int(m.get("pretrain_seed", 0)), 0)] = preds
    terms = []
    for t, wt in _weights(params, recs[0]).items():
        norm = recs[0]["norm"][t]
        for step, ws in step_weights.items():
            per_run = {run: _zs_preds(*preds[t][step]) for run, preds in runs.items()}
            terms.append(Term(t, norm["metric"], None, per_run,
                              wt * ws / (norm["sota"] - norm["random"]), norm["random"]))
    return run_contrast(terms, params)


def composite_se(params: Params, m: Mapping[str, Any], n_pretrain: int) -> float:
    """Examples-only standard error of one checkpoint's composite: per task the binomial sd at
    p = 0.5 (the largest; for MCC about the same scale) over its examples, in normalised
    units (/ (sota - random)), weighted, averaged over the pre-training seeds."""
    norm, n = m.get("norm", {}), m.get("n_examples", {})
    var = sum(w ** 2 * 0.25 / max(int(n.get(t, 1) or 1), 1)
              / (norm[t]["sota"] - norm[t]["random"]) ** 2
              for t, w in _weights(params, m).items() if t in norm)
    return math.sqrt(var / max(n_pretrain, 1))


def zeroshot_finding(params: Params, metrics: Metrics,
                     right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> Finding:
    """(d): composite above random at the last checkpoint AND a positive slope over
    log(step) from the end of warm-up on; the LSTM's variability is exploratory."""
    claim = "paper: \"zero-shot performance rises with pre-training\" (Figure 2 right)"
    recs = _zs_records(metrics, "transformer")
    curves = [_composite_curve(params, m) for m in recs]
    warm = params.pretrain.warmup_steps
    steps = sorted(set.intersection(*({s for s, _ in c if s >= max(warm, 1)} for c in curves))
                   ) if curves else []
    if len(steps) < 2:
        line = f"- **(d) {claim}: inconclusive** — fewer than two checkpoints after warm-up."
        return Finding("d", claim, "inconclusive", "n/a", "n/a", "n/a", "", line)
    last = steps[-1]
    v = stats.slope_weights([math.log(s) for s in steps])
    final_pts = {(int(m.get("pretrain_seed", 0)), 0): dict(c)[last]
                 for m, c in zip(recs, curves, strict=True)}
    slope_pts = {(int(m.get("pretrain_seed", 0)), 0): float(v @ [dict(c)[s] for s in steps])
                 for m, c in zip(recs, curves, strict=True)}
    final_est, _ = hierarchical_mean(final_pts)
    slope_est, per = hierarchical_mean(slope_pts)
    b_final = _zs_contrast(params, recs, {last: 1.0})
    b_slope = _zs_contrast(params, recs, dict(zip(steps, v, strict=True)))
    if b_final is None or b_slope is None:
        verdict = NO_CI
    else:
        above, rising = stats.superiority(b_final), stats.superiority(b_slope)
        verdict = ("held" if above == rising == "held" else
                   "not held" if "not held" in (above, rising) else "inconclusive")
    examples_only = stats.ContrastVariance(composite_se(params, recs[0], len(recs)) ** 2,
                                           0.0, 0.0, 0)
    mde = stats.mde(examples_only.scaled(math.sqrt(float(v @ v))), params.report.power)
    n_pre, _ = design(slope_pts)
    ci = ("n/a" if b_final is None or b_slope is None else
          conditional(f"final 95 % CI [{b_final.ci.low:+.3f}, {b_final.ci.high:+.3f}], slope "
                      f"95 % CI [{b_slope.ci.low:+.3f}, {b_slope.ci.high:+.3f}]", n_pre))
    rough = {model: [float(np.std(np.diff([x for _, x in _composite_curve(params, m)])))
                     for m in _zs_records(metrics, model)] for model in MODEL_LABELS}
    explore = ("; ".join(f"{MODEL_LABELS[k]} {np.mean(r):.3f}" for k, r in rough.items() if r)
               or "no curves")
    line = (f"- **(d) {claim}: {verdict}.** Transformer composite (declared weights "
            + ", ".join(f"{t} {w:.2f}" for t, w in _weights(params, recs[0]).items())
            + "; 0 = random guess, or the task's report.zeroshot_floors): "
            + f"{final_est:+.3f} at step {last}; slope over log(step) for steps "
            f"{', '.join(map(str, steps))} (from the end of warm-up, step {warm}) = "
            f"{slope_est:+.3f} per log-step ({n_pre} pre-training seed(s); "
            + "; ".join(f"p{p} {x:+.3f}" for p, x in per.items()) + "), "
            + (ci if ci != "n/a" else NO_CI) + ". Test: held = final composite above random "
            "(CI above 0) AND slope above 0 (CI above 0, same sign in every pre-training seed); "
            "margin: none. MDE of the slope "
            f"({100 * params.report.power:.0f} % power, examples only): {mde:.3f} per log-step. "
            "Exploratory, no verdict (the design has no test of variability): sd of the "
            f"composite's step-to-step change, {explore}.")
    return Finding("d", claim, verdict, f"final {final_est:+.3f}, slope {slope_est:+.3f}", ci,
                   f"{mde:.3f} per log-step", "", line)
