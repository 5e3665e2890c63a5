"""Typed, strict configuration: params.yaml (or a preset such as configs/paper.yaml) -> Params.

Every hyperparameter and path lives in the YAML file; this module only declares the schema
(no defaults on hyperparameters), validates ranges, and turns any violation into one line
naming the offending key (see `ParamsError`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    model_validator,
)

from gpt1.errors import Gpt1Error
from gpt1.tasks.registry import (  # upward import: task names checked against the table
    PAPER_TASKS,
    TASKS,
    CustomSource,
    custom_task,
    register_custom,
)

PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
Prob = Annotated[float, Field(ge=0.0, lt=1.0)]
PosFloat = Annotated[float, Field(gt=0.0)]
NonNegFloat = Annotated[float, Field(ge=0.0)]
Frac = Annotated[float, Field(ge=0.0, le=1.0)]
# YAML gives lists; accept them for tuple fields (items stay strictly typed).
StrTuple = Annotated[tuple[str, ...], Field(strict=False)]
IntTuple = Annotated[tuple[int, ...], Field(strict=False)]


def _distinct(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A list whose every entry is one run, stage or grid point: none twice (a repeated value
    would run one thing twice and count it as two, or leave a grid of "at least two" one)."""
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"must not repeat a value, got {repeated} more than once in "
                         f"{list(values)}")
    return values


def _distinct_ids(values: tuple[int, ...]) -> tuple[int, ...]:
    """A list of seeds or ids: at least one, none negative, none twice (a repeated seed would
    count one run as two; an empty list would run nothing and report nothing)."""
    if not values:
        raise ValueError("must list at least one value, got []")
    negative = [v for v in values if v < 0]
    if negative:
        raise ValueError(f"must be non-negative, got {negative} in {list(values)}")
    return _distinct(values)


IdTuple = Annotated[IntTuple, AfterValidator(_distinct_ids)]
"""Seeds or ids: non-empty, unique, non-negative."""


def _distinct_indices(values: tuple[int, ...]) -> tuple[int, ...]:
    """A list of indices that may be empty (nothing to run): none negative, none twice."""
    return _distinct_ids(values) if values else values


IndexTuple = Annotated[IntTuple, AfterValidator(_distinct_indices)]
"""Indices: unique, non-negative; empty = none."""


def _rising(values: tuple[int, ...]) -> tuple[int, ...]:
    """Budgets in increasing order, each positive (an empty list: none)."""
    if any(v <= 0 for v in values):
        raise ValueError(f"must be positive, got {list(values)}")
    if list(values) != sorted(set(values)):
        raise ValueError(f"must rise strictly (no value twice), got {list(values)}")
    return values


BudgetTuple = Annotated[IntTuple, AfterValidator(_rising)]
"""Budgets (tokens): positive, strictly increasing; empty = none."""
NameTuple = Annotated[StrTuple, AfterValidator(_distinct)]
"""Names of tasks, arms, stages or tokens: each once."""


class ParamsError(ValueError):
    """A params file that does not match the schema; str() is one line naming the key."""


class Section(BaseModel):
    """Base of every section: frozen, unknown keys rejected, no type coercion from strings,
    no .inf / .nan (a non-finite learning rate or fraction only fails later, mid-run)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True,
        allow_inf_nan=False,
    )


class Paths(Section):
    """Every file and directory the pipeline reads or writes, relative to the repo root."""

    mirror_dir: str | None
    """Local mirror with corpus/*.txt and tasks/<TASK>/; null = download from the hub."""
    mirror_scan: str
    """sha256 fingerprints of the mirror's corpus and task folders (one JSON per input): what
    DVC tracks of the mirror, so a missing mirror or null is the pipeline's own error / the hub."""
    raw: str
    """Download stage output: manifest.json (sha256 of every raw input) plus hub downloads."""
    clean_corpus: str
    """Cleaned corpus parquet (doc_id, source, text)."""
    corpus_checks: str
    """great-expectations validation result of the cleaned corpus (JSON)."""
    data_docs: str
    """great-expectations Data Docs: <data_docs>/corpus and <data_docs>/tasks/<task> (one site
    over its splits), each an index.html and a DVC output of its gate stage, and the home page
    <data_docs>/index.html over all of them (the data_docs stage)."""
    tokenizer: str
    """Directory holding the trained BPE tokenizer."""
    shards: str
    """Directory of binary token shards (train_*.bin, val_*.bin, index.json)."""
    checkpoints: str
    """Pre-training run directory of the Transformer (checkpoints, final weights)."""
    dose_checkpoints: str
    """The dose curve's pre-training runs of the Transformer: <dose_checkpoints>/<tokens>/p<seed>,
    one complete run per budget of curves.dose_tokens (stage pretrain_dose)."""
    lstm_checkpoints: str
    """Pre-training run directory of the LSTM baseline."""
    tasks: str
    """Canonical per-task parquet tables (one directory per task)."""
    finetuned: str
    """Fine-tuning outputs (one directory per task / variant)."""
    metrics: str
    """Metrics JSON files read by DVC (one per stage)."""
    reports: str
    """Human-readable reports and figures."""


class DataCfg(Section):
    """Where the raw corpus comes from (Radford et al. 2018, 4.1: BooksCorpus)."""

    source: Literal["mirror", "hub"]
    """`mirror`: read paths.mirror_dir/corpus/*.txt in place; `hub`: datasets.load_dataset."""
    hub_dataset: str
    """Hub dataset id for the corpus when source = hub."""
    hub_split: str
    """Split of the hub dataset."""
    hub_text_field: str
    """Column holding the text in the hub dataset."""
    max_documents: PosInt | None
    """Cap on documents taken from the source (demo runs); null = all."""
    download_retries: NonNegInt
    """Retries on transient network errors (exponential back-off)."""


class CleanCfg(Section):
    """Text cleaning (spec §5: ftfy, punctuation/whitespace standardisation, spaCy tokens)."""

    strip_gutenberg: bool
    """Remove Project Gutenberg header/licence and footer when the markers are present."""
    unwrap_lines: bool
    """Join hard-wrapped lines inside a paragraph; paragraphs stay separated by newlines."""
    max_file_bytes: PosInt
    """Files larger than this are skipped (counted under `too_large`)."""
    max_line_chars: PosInt
    """A file with a line longer than this is skipped (counted under `line_too_long`)."""
    min_document_chars: PosInt
    """Documents shorter than this after cleaning are dropped (counted under `too_short`)."""
    workers: PosInt
    """Processes cleaning documents in parallel (1 = in-process); the output does not depend
    on it (documents are cleaned independently and kept in input order)."""


class ChecksCfg(Section):
    """Data-quality gate over the cleaned corpus (great-expectations)."""

    min_document_chars: PosInt
    max_document_chars: PosInt
    max_mojibake_frac: Frac
    """Highest tolerated fraction of documents containing typical mojibake sequences."""


class BpeCfg(Section):
    """Byte-pair encoding (spec §1 and 5: 40,000 merges, lower-cased, `</w>`)."""

    n_merges: PosInt
    """Number of BPE merges learned (paper: 40,000)."""
    min_frequency: PosInt
    """A pair must occur at least this often to be merged."""
    lowercase: bool
    end_of_word_suffix: str
    special_tokens: NameTuple
    """Appended after the vocabulary in this order (spec §5)."""


class ShardCfg(Section):
    """Token shards written for training."""

    val_frac: Annotated[float, Field(gt=0.0, lt=1.0)]
    """Fraction of documents (not tokens) held out for validation."""
    tokens_per_shard: PosInt
    encode_batch_docs: PosInt
    """Documents per encode_batch call."""


class ModelCfg(Section):
    """GPT-1 Transformer (spec §1). Field names follow transformers' OpenAIGPTConfig."""

    arch: Literal["gpt1", "gpt2"]
    """gpt1 = post-LN (paper); gpt2 = pre-LN plus final LayerNorm (spec §4)."""
    n_positions: PosInt
    """Context window k in tokens."""
    n_embd: PosInt
    n_layer: PosInt
    n_head: PosInt
    n_inner: PosInt
    """Position-wise feed-forward width (paper: 3072)."""
    afn: Literal["gelu"]
    """tanh-approximated GELU (spec §5)."""
    resid_pdrop: Prob
    embd_pdrop: Prob
    attn_pdrop: Prob
    embd_dropout: Literal["activations", "matrix"]
    """`activations`: drop the summed embeddings (PyTorch ports); `matrix`: drop entries of the
    embedding matrix, which also feeds the tied output layer (original TF release)."""
    layer_norm_epsilon: PosFloat
    initializer_range: PosFloat
    """Std of the N(0, s) weight init."""
    vocab_pad_multiple: PosInt
    """The output layer's rows (the tied embedding) padded up to a multiple of this for aligned
    GEMMs on the GPU (64; 1 = unpadded, as runs written before this key). The padded rows stay
    zero, their logits are excluded from softmax and loss, and exports strip them."""
    backend: Literal["auto", "torch", "cpu_fused"]
    """How the model computes (gpt1/backends): `torch` = gpt1/model.py as written; `cpu_fused` =
    the fused CPU kernels (hash-seeded dropout masks); `auto` = cpu_fused on CPU when the kernel
    library builds, torch otherwise (CUDA always)."""

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelCfg:
        if self.n_embd % self.n_head:
            raise ValueError(f"model.n_head: {self.n_head} does not divide n_embd={self.n_embd}")
        return self


class LstmCfg(Section):
    """LSTM language-model baseline (paper Table 5: one layer, 2048 units)."""

    n_layer: PosInt
    hidden_size: PosInt
    n_embd: PosInt
    """Embedding width (tied to the output layer through a projection when != hidden_size)."""
    dropout: Prob
    """Dropout on the embeddings and on the LSTM outputs."""
    initializer_range: PosFloat
    """Std of the N(0, s) init of the embedding and projection (as the Transformer's)."""
    lr_max: PosFloat | None
    """Peak lr of the LSTM's pre-training (its own: an LSTM trains at another lr than the
    Transformer); null = pretrain.lr_max. Every other pre-training setting is pretrain's."""


class PretrainCfg(Section):
    """Unsupervised pre-training (spec §1)."""

    lr_max: PosFloat
    warmup_steps: NonNegInt
    """Linear warm-up from 0 over this many updates, then `lr_schedule` decay to 0."""
    lr_schedule: Literal["cosine", "linear"]
    """Decay after warm-up: cosine annealing to 0 (paper) or linear decay to 0."""
    batch_seqs: PosInt
    """Sequences per optimizer update (global, across ranks and accumulation)."""
    micro_batch_seqs: Literal["auto"] | PosInt
    """Sequences per forward/backward on one rank; `auto` = the largest that fits this
    device's memory (a probe before the first update, gpt1/micro_batch.py; batch_seqs / ranks
    when it fits), recorded in the checkpoints and model.json."""
    seq_len: PosInt
    """Tokens per training sequence (<= model.n_positions)."""
    epochs: PosFloat | None
    """Training length in passes over the train shards; exactly one of epochs / max_tokens."""
    max_tokens: PosInt | None
    """Training length in tokens; exactly one of epochs / max_tokens."""
    adam_beta1: Prob
    adam_beta2: Prob
    adam_eps: PosFloat
    weight_decay: NonNegFloat
    """Decoupled weight decay on tensors of rank > 1 only."""
    grad_clip: PosFloat
    precision: Literal["auto", "fp32", "bf16"]
    """auto = bf16 autocast on CUDA or on a CPU with native bf16 (AMX / AVX512-BF16), else fp32
    (e.g. AVX2-only x86-64). bf16 on a CPU without it runs emulated, many times slower (a
    warning says so), and the LSTM layer runs in fp32 where oneDNN has no bf16 LSTM."""
    compile: bool
    cuda_graphs: bool
    """Run each update's forward and backward as CUDA graphs (gpt1/graphs.py: torch.compile's
    mode reduce-overhead; needs compile: true and a GPU). Where they cannot run (a CPU under
    device auto, several micro-batches an update) one warning line says so and the run goes
    on without them; with several DDP ranks the run is refused at start (one line, exit 2).
    Changes speed, not the result's distribution."""
    cuda_graph_scope: Literal["forward_backward", "update"]
    """What a graph holds with cuda_graphs on (gpt1/graphs.py): `forward_backward` = each
    micro-batch's forward and backward (torch.compile's reduce-overhead), clip and AdamW outside;
    `update` = the whole update, forward, backward, clip and the fused AdamW step, one graph
    recorded by hand over the compiled module (one micro-batch an update). The dropout rule is
    the eager one in both."""
    loss_chunk_tokens: PosInt | None
    """The output layer and the cross-entropy fused, this many tokens at a time
    (gpt1.model.LinearCrossEntropy): the forward makes each chunk's fp32 logits, its loss and
    its gradients, so the (tokens x vocabulary) logits are never held whole, forward or
    backward; null = the output layer, then the loss (the logits of every token at once). The
    same loss and gradients up to rounding; off until a GPU measures it (docs/gpu.md)."""
    fused_clip: bool
    """Clip the gradient norm inside the fused AdamW kernel (gpt1.step.clip_scale: each
    gradient divided as the kernel reads it, GradScaler's unscale) instead of in a pass over
    every gradient of its own; the same update up to fp32 rounding."""
    bf16_norms: bool
    """Under bf16 autocast, LayerNorm outputs stay bf16 (gpt1.model.LayerNorm; autocast makes
    them fp32): in the post-LN blocks the residual stream, its sums and dropouts then run in
    bf16, statistics still accumulated in fp32. Nothing changes in fp32 runs."""
    nproc: Literal["auto"] | PosInt
    """Processes `python -m gpt1 pretrain` / `pretrain_lstm` launches itself over on this node
    (torch's elastic launcher, one per GPU; gloo processes on the CPU): `auto` = every GPU
    torch sees (1 on the CPU). Changes how the global batch is split, never the result."""
    ddp_bucket_mb: PosInt
    """DDP gradient all-reduce bucket size (MB), several ranks only."""
    ddp_bf16_grads: bool
    """All-reduce gradients in bf16 (half the bytes) instead of fp32; several ranks only."""
    zero1: bool
    """Shard the Adam state over the DDP ranks (ZeRO-1, gpt1/zero1.py): each rank keeps the
    moments of the parameters it owns (about 1/N); checkpoints still hold the whole state.
    Several ranks only; changes memory, never the result."""
    eval_interval_steps: PosInt
    eval_batches: PosInt
    """Validation windows: eval_batches x micro_batch_seqs (x batch_seqs with `auto`)."""
    log_interval_steps: PosInt
    checkpoint_interval_steps: PosInt
    zero_shot_checkpoints: NonNegInt
    """Number of checkpoints kept for the zero-shot study: step 0 (the random init), then
    log-spaced from the end of warm-up to the last update."""
    seeds: IdTuple
    """Pre-training seeds: one pre-training run (DVC stage pretrain@<seed>, pretrain_lstm@<seed>)
    per seed, and every fine-tuning / zero-shot stage runs once per seed (demo and paper: one)."""
    import_hf: str | None
    """null: pre-train on the token shards. A transformers OpenAIGPTLMHeadModel directory (the
    released GPT-1 weights; or a hub name, fetched when online): train_bpe converts its
    tokenizer and pretrain its weights instead (gpt1/hf_stand_in.py, docs/import-hf.md)."""

    def accumulation(self, world: int, micro: int | None = None) -> int:
        """Micro-batches per rank and update: batch_seqs = micro x this x `world` ranks (micro:
        the resolved size, default micro_batch_seqs), else a Gpt1Error naming the keys (checked
        before ranks are launched, and by each rank). For `auto` before its probe: the batch
        must split over the ranks (returns 1)."""
        size = self.micro_batch_seqs if micro is None else micro
        if size == "auto":
            if self.batch_seqs % world:
                raise Gpt1Error(f"pretrain.batch_seqs={self.batch_seqs} does not split over "
                                f"{world} ranks (micro_batch_seqs: auto)")
            return 1
        accum, rem = divmod(self.batch_seqs, size * world)
        if rem or accum < 1:
            raise Gpt1Error(f"pretrain.batch_seqs={self.batch_seqs} is not micro_batch_seqs="
                            f"{size} x accumulation x {world} ranks")
        return accum

    def refuse_graphs_with_ddp(self, world: int) -> None:
        """Stop (Gpt1Error: one line, exit 2) when cuda_graphs is on with several DDP ranks:
        DDP's all-reduce hooks fire from inside the graphed backward, which is neither built
        nor measured. A refusal, not a quiet fallback, so a multi-GPU run never runs without
        the graphs it asked for (the launcher asks before launching ranks, each rank again)."""
        if self.cuda_graphs and world > 1:
            raise Gpt1Error(f"pretrain.cuda_graphs: true with {world} DDP ranks: CUDA graphs "
                            "under DDP are not supported yet (its all-reduce hooks); set "
                            "pretrain.cuda_graphs: false, or pretrain.nproc: 1")

    @model_validator(mode="after")
    def _one_budget(self) -> PretrainCfg:
        if (self.epochs is None) == (self.max_tokens is None):
            raise ValueError("pretrain.epochs: set exactly one of epochs / max_tokens")
        if self.micro_batch_seqs != "auto" and self.batch_seqs % self.micro_batch_seqs:
            raise ValueError(
                f"pretrain.micro_batch_seqs: {self.micro_batch_seqs} does not divide "
                f"batch_seqs={self.batch_seqs}"
            )
        return self


class TaskOverride(Section):
    """Per-task fine-tuning overrides (only the keys given change)."""

    lr: PosFloat | None = None
    epochs: PosInt | None = None
    batch_size: PosInt | None = None
    max_train_examples: PosInt | None = None
    max_eval_examples: PosInt | None = None


class FinetuneCfg(Section):
    """Supervised fine-tuning (spec §2)."""

    tasks: NameTuple
    lr: PosFloat
    batch_size: PosInt
    epochs: PosInt
    warmup_frac: Frac
    """Linear warm-up over this fraction of updates, then linear decay to 0."""
    lm_coef: NonNegFloat
    """lambda, weight of the auxiliary LM loss (0 disables it)."""
    clf_pdrop: Prob
    init: Literal["pretrained", "scratch"]
    layers_transferred: NonNegInt | None
    """Embeddings plus the first k blocks copied from pre-training; null = all."""
    seeds: IdTuple
    """Training seeds of every fine-tuning cell (non-empty, unique, non-negative)."""
    max_train_examples: PosInt | None
    """Cap on training examples per task (demo runs); null = all."""
    max_eval_examples: PosInt | None
    select: Literal["final", "dev"]
    """final = score the last epoch (the paper: 3 epochs, no selection); dev = keep the epoch
    best on the dev split (accuracy for F1 tasks, degenerate epochs last, ties to the later
    epoch); the dev split is never a reported one."""
    bucket_pool_batches: PosInt | None
    """Length-bucketed batches (gpt1/batching.py): each epoch's seeded shuffle is cut into pools
    of this many batches, each pool sorted by length into batches, the batches visited in a
    seeded order (the same examples and updates, less padding); null = random batches."""
    overrides: dict[str, TaskOverride]
    log_interval_steps: PosInt
    """Train loss read from the device and logged every this many updates and at each epoch's
    end; the updates between run without a host sync."""
    compile: bool
    """torch.compile the task model (a C compiler needed, else eager + one warning)."""


class CustomTaskCfg(Section):
    """A task of the user's own, fine-tuned, scored, served and exported like the paper's
    (gpt1/tasks/custom.py): classification of one text, or of a pair when text_b is given."""

    file: str
    """CSV, TSV (with a header) or JSONL file of labelled examples, relative to the repo."""
    text: str
    """Column of the text (a pair task's first text)."""
    text_b: str | None = None
    """Column of a pair task's second text; null = one text per example."""
    label: str
    """Column of the label."""
    labels: Annotated[StrTuple, Field(min_length=2)]
    """The label values, in the head's order (F1: the second is the positive class)."""
    metric: Literal["acc", "f1", "mcc"] = "acc"
    split: str | None = None
    """Column naming each row's split (train / dev / test); null = dev and test carved
    (tasks.dev_frac / dev_examples, tasks.test_frac, tasks.carve_seed)."""


class TasksCfg(Section):
    """Canonical task tables (gpt1/tasks): carved-out splits and input truncation (spec §5)."""

    carve_seed: NonNegInt
    """Seed of every carved-out split (fixed apart from the training seeds)."""
    dev_frac: Annotated[float, Field(gt=0.0, lt=1.0)]
    """Fraction of a task's train rows carved out as the dev (model-selection) split when the
    mirror has no separate one (MNLI, QQP, RTE, SST-2, CoLA, MRPC, SciTail)."""
    test_frac: Annotated[float, Field(gt=0.0, lt=1.0)]
    """Fraction carved out as the reported test split when the mirror has a single labelled
    file for the task (SciTail: only the official test)."""
    dev_examples: dict[str, PosInt]
    """Fixed dev size per task, overriding dev_frac (story_cloze: 374, spec §5)."""
    fresh_examples: dict[str, PosInt]
    """Per task: about this many labelled rows carved (seed carve_seed, whole groups of rows
    sharing text_a, so no question or premise is on both sides) from its training pool as
    the `fresh` split, a scored split no earlier run saw; the training pool every sample and
    pilot split is drawn from is the rest. {} = none (every task scores its test split only)."""
    scored_ids: dict[str, str]
    """Per task with a fresh split: a committed file of training-pool row ids some earlier run
    scored (one id a line, `#` comments; configs/scored/, which prepare_task depends on). No
    fresh row is one of them or shares its text_a. {} = none."""
    truncation: Literal["half", "longest_first"]
    """half: each of the two segments cut to n_ctx // 2 - 2 tokens (original release,
    spec §5); longest_first: cut the longer segment until the sequence fits n_ctx."""
    truncation_overrides: dict[str, Literal["half", "longest_first"]]
    """Per-task truncation rule replacing `truncation` (paper preset: RACE longest_first, so a
    RACE passage gets the full context; "half" is the original's ROCStories rule)."""
    truncate_keep: Literal["head", "tail"]
    """Which end of an over-long segment is kept (original: head, `ctx[:max_len]`). In a
    multiple-choice context the question is kept whole and the passage is cut."""
    custom: dict[str, CustomTaskCfg]
    """Tasks of the user's own by name (lower-case, not a paper task's): list a name in
    finetune.tasks and DVC prepares, fine-tunes and reports it like the 12 paper tasks."""

    @property
    def names(self) -> tuple[str, ...]:
        """Every task these params can run: the paper's 12 and tasks.custom."""
        return (*PAPER_TASKS, *self.custom)

    @model_validator(mode="after")
    def _custom_names(self) -> TasksCfg:
        for name, task in self.custom.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name in PAPER_TASKS:
                raise ValueError(f"tasks.custom.{name}: a new lower-case name (letters, digits, "
                                 "_), not one of the paper's tasks")
            if len(set(task.labels)) < len(task.labels):
                raise ValueError(f"tasks.custom.{name}.labels: a label is listed twice")
        register_custom({name: custom_task(name, CustomSource(
            file=t.file, text_a=t.text, text_b=t.text_b, label=t.label, split=t.split),
            tuple(t.labels), t.metric) for name, t in self.custom.items()})
        return self


TRACKING_STORE_URI = re.compile(r"^(sqlite|https?|postgresql|mysql)[+\w]*://")
"""The tracking stores gpt1 logs to: a database or a server (never MLflow's file store)."""


class TrackingCfg(Section):
    """MLflow experiment tracking (gpt1/tracking/); changes no result, only what is recorded."""

    enabled: bool
    """Log params, step metrics and artifacts of every stage to MLflow."""
    uri: str | None
    """Tracking URI (sqlite:///abs/path.db or http://host:port); a relative sqlite path is taken
    from the repo root; null = $MLFLOW_TRACKING_URI, else sqlite:///<repo>/mlflow.db."""
    experiment: str
    """MLflow experiment holding the pipeline runs."""
    ui_url: str
    """Address of the MLflow UI (`gpt1 serve` binds it there); used in links to runs."""

    @model_validator(mode="after")
    def _no_file_store(self) -> TrackingCfg:
        if self.uri is not None and not TRACKING_STORE_URI.match(self.uri):
            raise ValueError(
                f"tracking.uri: {self.uri!r} is not a database or server URI "
                "(the MLflow file store is deprecated; use sqlite:///... or http://...)"
            )
        if not re.match(r"^https?://[^/:]+:\d+/?$", self.ui_url):
            raise ValueError(f"tracking.ui_url: {self.ui_url!r} is not http://host:port")
        return self


def _auto_or_count(value: Any) -> int | Literal["auto"]:
    """`auto` or a positive integer (one line either way, not one per branch of the union)."""
    if value == "auto" or (type(value) is int and value > 0):
        return value  # type: ignore[no-any-return]
    raise ValueError(f"must be auto or a positive integer, got {value!r}")


def _auto_or_ids(value: Any) -> tuple[int, ...] | Literal["auto"]:
    """`auto`, [] or a list of distinct device indices."""
    if value == "auto":
        return "auto"
    if isinstance(value, list | tuple) and all(type(v) is int for v in value):
        return _distinct_ids(tuple(value)) if value else ()
    raise ValueError(f"must be auto or a list of device indices, got {value!r}")


class OrchestrateCfg(Section):
    """How the Prefect flow (pipelines/gpt1_flow.py) runs the DVC stages; changes no result."""

    max_parallel_stages: Annotated[PosInt | Literal["auto"], PlainValidator(_auto_or_count)]
    """Stages with no path between them in the DVC graph (fine-tunes) run at most this many
    at once; `auto` = one per device handed out (`devices`), 1 where there are none."""
    io_stages: NameTuple
    """Stages doing network / remote I/O, retried on failure (no other stage is retried)."""
    io_retries: NonNegInt
    io_retry_delay_seconds: NonNegFloat
    devices: Annotated[Literal["auto"] | tuple[int, ...], PlainValidator(_auto_or_ids),
                       PlainSerializer(lambda v: v if v == "auto" else list(v), when_used="json")]
    """This worker's CUDA devices (indices) the flow hands out to concurrent stages: pre-training
    takes them all, each other model stage one (CUDA_VISIBLE_DEVICES, pipelines/devices.py);
    `auto` = every GPU the worker sees (its CUDA_VISIBLE_DEVICES when set; none with
    `device: cpu`); [] = none declared: every stage sees what the worker sees."""
    dvc_remote: str | None
    """DVC remote shared by workers on different machines: a flow run in a worker's clone
    (gpt1/demo-remote) pulls each stage's deps from it before and pushes its outs after; a
    flow on this machine works in the workspace's DVC cache, no pull or push; null = none."""


class AblationPreset(Section):
    """One Table 5 row: the finetune stage with these overrides (spec §3, Table 5)."""

    body: Literal["transformer", "lstm"]
    """Pre-trained network fine-tuned: the Transformer (paths.checkpoints) or the LSTM LM
    (paths.lstm_checkpoints)."""
    init: Literal["pretrained", "scratch"]
    """scratch = the body's random init (Transformer w/o pre-training)."""
    lm_coef: NonNegFloat | None
    """lambda of the auxiliary LM loss; null = finetune.lm_coef; 0 = w/o aux LM."""


class LrPilotCfg(Section):
    """The pilot of every arm: each (lr, warm-up) of one grid, the same
    for every arm, fine-tunes on the arm's fine-tuning training sample and is scored on a split
    carved from the rest of the training pool; the arm's confirmatory runs use the best one.
    The fine-tuning recipe (finetune.lr, finetune.warmup_frac) is scored beside it as its own
    row ("paper recipe"), never chosen."""

    variants: NameTuple
    """Arms the pilot tunes: `full` (the finetune stage's row, stage lr_pilot_full@<task>) and
    Table 5 rows of ablations.variants (stage lr_pilot@<arm>-<task>)."""
    lr_grid: Annotated[tuple[PosFloat, ...], Field(strict=False, min_length=2),
                       AfterValidator(_distinct)]
    """Learning rates tried (at least two)."""
    warmup_grid: Annotated[tuple[Frac, ...], Field(strict=False, min_length=1),
                           AfterValidator(_distinct)]
    """Warm-up fractions tried with each lr (finetune.warmup_frac of the run)."""
    dev_examples: PosInt
    """Examples carved (seed `seed`) out of the training pool as the pilot's split before any
    fine-tuning sample is drawn; every sample of every arm and seed comes from the rest (never
    a scored split)."""
    seed: NonNegInt
    """Fine-tuning seed of the pilot runs (and of the carve)."""


def at_grid_edge(value: float, grid: Sequence[float]) -> bool:
    """Whether a chosen `value` is the smallest or largest of its `grid` (a one-value grid:
    always): the optimum may then lie outside the grid."""
    return value <= min(grid) or value >= max(grid)


class FloorCfg(Section):
    """Table 5's bag-of-words floor (gpt1/floor.py): TF-IDF word n-grams + logistic regression,
    C chosen by stratified k-fold CV on each run's training sample only."""

    ngram_max: PosInt
    """Word n-grams 1..ngram_max (2 = uni+bigrams)."""
    min_df: PosInt
    """An n-gram enters the vocabulary when at least this many training texts have it."""
    c_grid: Annotated[tuple[PosFloat, ...], Field(strict=False, min_length=1),
                      AfterValidator(_distinct)]
    """Inverse regularisation strengths tried (ties to the smaller C)."""
    cv_folds: Annotated[int, Field(ge=2)]
    """Folds of the cross-validation that chooses C."""
    max_iter: PosInt
    """Solver iterations of the logistic regression."""


FULL_ARM = "full"
"""The finetune stage's row (pre-trained, aux LM): piloted like an ablation variant."""
SCRATCH_ARM = "scratch"
"""Table 5's row without pre-training: finding (a)'s baseline and the dose curve's dose 0."""


class AblationsCfg(Section):
    """Table 5 ablations: the same finetune stage over variants x tasks (spec §3)."""

    tasks: NameTuple
    """Tasks of Table 5 (paper: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE)."""
    variants: NameTuple
    """Rows run by DVC (ablation@<variant>-<task>); each a key of `presets`."""
    presets: dict[str, AblationPreset]
    pilot: LrPilotCfg
    floor: FloorCfg
    """The bag-of-words floor row (stage floor@<task> per task of `tasks`; a regression or
    multiple-choice task records that the floor does not apply)."""

    @model_validator(mode="after")
    def _known_variants(self) -> AblationsCfg:
        if FULL_ARM in self.variants:  # the finetune stage's row: lr_pilot_full pilots it
            raise ValueError(f"ablations.variants: {FULL_ARM!r} is the finetune stage's row, "
                             "not an ablation (list it in ablations.pilot.variants to pilot it)")
        unknown = [v for v in (*self.variants, *self.pilot.variants)
                   if v not in self.presets and v != FULL_ARM]
        if unknown:
            raise ValueError(f"ablations.variants: {unknown} not in ablations.presets")
        stray = [v for v in self.pilot.variants if v not in (*self.variants, FULL_ARM)]
        if stray:  # the pilot runs per row of ablations.variants (dvc.yaml lr_pilot)
            raise ValueError(f"ablations.pilot.variants: {stray} not in ablations.variants or full")
        return self


class LayersCfg(Section):
    """Figure 2 left: fine-tune after transferring the embeddings + first k blocks (spec §3)."""

    tasks: NameTuple
    """Tasks of the study (paper: MultiNLI, RACE)."""
    layers_transferred: IdTuple
    """Values of k (paper: 0..12); each <= model.n_layer (checked by the stage, so that
    presets with fewer layers can keep the list)."""
    max_train_examples: PosInt | None
    """Cap on training examples of each run of the study; null = finetune's caps."""
    max_eval_examples: PosInt | None
    """Cap on dev (and train-accuracy) examples of each run; null = finetune's caps."""


class CurvesCfg(Section):
    """Where pre-training can show: the labelled-data curve (each arm
    fine-tuned on n training examples, the bag-of-words floor at the same n) and the
    pre-training-compute curve (one recipe fine-tuned from each kept zero-shot checkpoint of a
    pre-training run, so accuracy vs pre-training step can be tested as a slope)."""

    tasks: NameTuple
    """Tasks of both curves; each in ablations.tasks (whose pilots choose the arms' lr)."""
    ns: IdTuple
    """Training examples per run of the labelled-data curve (each > 0)."""
    arms: NameTuple
    """Neural arms of the labelled-data curve: full (the pre-trained Transformer) or a name of
    ablations.presets (at the lr its pilot chose); the bag-of-words floor runs at every n."""
    compute_n: PosInt
    """Training examples per run of the pre-training-compute curve (the `full` recipe)."""
    checkpoints: IndexTuple
    """Kept zero-shot checkpoints the compute curve fine-tunes from, by index in step order
    (0 = step 0, the random init; pretrain.zero_shot_checkpoints - 1 = the last); empty = no
    compute curve. Mid-run checkpoints of one schedule, not a dose-response (`dose_tokens`)."""
    dose_tokens: BudgetTuple
    """The dose curve's pre-training budgets (tokens) below pretrain.max_tokens, at least two,
    each a complete pre-training run of its own (stage pretrain_dose: its own pretrain.warmup_steps
    warm-up, then its decay to 0 at its own end; not a checkpoint of the main run). The main run
    (pretrain.max_tokens) is the curve's top dose and from scratch its dose 0. Empty = no dose
    curve."""
    dose_tasks: NameTuple
    """Tasks of the dose curve, each in ablations.tasks (empty exactly when dose_tokens is):
    every budget is fine-tuned as Table 5's `full` row (its training samples, seeds and scored
    split) at the (lr, warm-up) of its own pilot (stage pilot_dose); dose 0 and the top dose are
    Table 5's `scratch` and `full` rows, each at its own pilot's choice."""

    @model_validator(mode="after")
    def _positive_ns(self) -> CurvesCfg:
        if 0 in self.ns:
            raise ValueError(f"curves.ns: must be positive, got 0 in {list(self.ns)}")
        return self


class ZeroShotTask(Section):
    """Normalisation of one zero-shot task: 0 = random guess, 1 = state of the art."""

    metric: Literal["acc", "mcc"]
    random: float
    """Score of a random guess (fraction; MCC of a random guess is 0)."""
    sota: float
    """Single-model state of the art (fraction), from `source`."""
    source: str
    """Where the state-of-the-art value comes from (paper, table, split)."""


ZEROSHOT_TASKS = ("sst2", "cola", "race", "dprd")
"""The tasks the zero-shot heuristics score (Figure 2 right, spec §3)."""


class ZeroShotCfg(Section):
    """Figure 2 right: LM-only heuristics on log-spaced pre-training checkpoints (spec §3)."""

    tasks: NameTuple
    """Subset of ZEROSHOT_TASKS."""
    max_examples: PosInt | None
    """Examples scored per task (a seeded subset; null = all), also for the CoLA threshold."""
    batch_size: PosInt
    """Sequences per forward pass."""
    sst2_cue: str
    """Word appended to the sentence before reading the LM's next word (paper: "very")."""
    sst2_words: NameTuple
    """Words whose probabilities are compared, in label order (negative, positive)."""
    cola_threshold_split: Literal["train", "dev"]
    """Canonical split on which the average-log-prob threshold is fitted (best MCC); it is then
    applied to the test split. The paper does not say how its threshold was chosen."""
    dprd_split: Literal["train", "test"]
    """DPRD file scored (<mirror>/tasks/DPRD/<split>.c.txt)."""
    norm: dict[str, ZeroShotTask]
    """Per task: random baseline and state of the art used to normalise (Figure 2 right)."""

    @model_validator(mode="after")
    def _known_tasks(self) -> ZeroShotCfg:
        bad = [t for t in self.tasks if t not in ZEROSHOT_TASKS]
        if bad:
            raise ValueError(f"zeroshot.tasks: {bad} unknown; known: {sorted(ZEROSHOT_TASKS)}")
        missing = [t for t in self.tasks if t not in self.norm]
        if missing:
            raise ValueError(f"zeroshot.norm: no entry for {missing}")
        if len(self.sst2_words) != 2:
            raise ValueError("zeroshot.sst2_words: needs exactly 2 words (negative, positive)")
        return self


class DesignSd(Section):
    """Variance components of a run-level arm difference (fractions) for the MDE."""

    pretrain: NonNegFloat
    """sd between pre-training seeds of a task's arm difference."""
    seed: NonNegFloat
    """sd between fine-tuning seeds (within a pre-training seed) of a task's arm difference."""
    accuracy: Frac
    """Accuracy of each arm for the per-example (binomial) variance of a paired difference."""


class ReportCfg(Section):
    """Report stage: the paper's Tables 2-5 beside ours, and Figure 2 (spec §3)."""

    paper: dict[str, dict[str, float]]
    """table2 / table3 / table4: column -> the paper's number, exactly as spec §3."""
    paper_ablations: dict[str, dict[str, float]]
    """Table 5: ablation variant (`full` = finetune) -> column (and Avg) -> paper number."""
    row_labels: dict[str, str]
    """Table 5 row label of each variant."""
    columns: dict[str, StrTuple]
    """Column -> our scores averaged into it, as `task.score` (`glue` = the GLUE average)."""
    glue: dict[str, StrTuple]
    """Our GLUE average: task -> its scores (averaged per task, then over tasks)."""
    figure_dpi: PosInt
    """Resolution of reports/figure2.png."""
    paper_figure2: dict[str, str]
    """What the paper's Figure 2 panels show (`left`, `right`), quoted beside ours."""
    preset: Literal["demo", "study", "gpu-study", "paper", "paper-finetune"]
    """Which preset the params file is, named in the report's banner."""
    bootstrap_samples: Annotated[int, Field(ge=100)]
    """Resamples of the eval examples behind every 95 % CI (percentile bootstrap)."""
    bootstrap_seed: NonNegInt
    """Seed of the resampling, so a report is reproducible."""
    confirmatory_tasks: NameTuple
    """Tasks of the confirmatory tests of findings (a), (b), (e) (docs/study.md): where the
    model learns; the other Table 5 columns are reported descriptively."""
    gate_margins: dict[str, Annotated[float, Field(ge=0.0, lt=0.5)]]
    """The gate fixed in the plan (docs/study.md, Build 6): confirmatory task -> margin (a
    fraction). A piloted baseline arm whose best pilot configuration's accuracy does not
    reach its carved pilot split's majority share + this margin makes the finding that needs
    it "untestable at this budget" (no estimate), decided from the pilot records only."""
    margin: PosFloat
    """delta of finding (b)'s non-superiority test (a fraction: 0.01 = 1 point): held = "no
    gain >= delta" when the 90 % upper bound of (with aux LM - without) is below it."""
    power: Annotated[float, Field(gt=0.0, lt=1.0)]
    """Power at which each design's minimum detectable effect (MDE) is stated."""
    declared_effect: Annotated[float, Field(gt=0.0, lt=1.0)]
    """The effect a superiority finding's design is powered for (a fraction: 0.04 = 4
    points); a finding whose design has less than `power` at it says so beside its verdict."""
    degenerate_frac: Annotated[float, Field(gt=0.5, le=1.0)]
    """A cell whose predictions are at least this fraction one class is flagged (with a cell
    whose CI does not clear the majority baseline): no delta vs the paper is printed for it."""
    zeroshot_weights: dict[str, PosFloat]
    """Finding (d)'s zero-shot composite: task -> weight, declared in advance (normalised over
    the tasks scored)."""
    zeroshot_floors: dict[str, Frac]
    """Zero-shot task -> the raw score at 0 of the normalised scale of finding (d) and Figure 2
    right, where it is not zeroshot.norm's random guess: SST-2 at its majority share (a
    constant answer scores it, so 0.5 would credit pre-training with a constant's 0.9
    points). The report renormalises the records' raw scores (gpt1.report.figure2.at_floors)."""
    design_sd: DesignSd
    """Declared variance components behind each design's MDE (docs/study.md)."""
    max_seeds: Annotated[int, Field(ge=2, le=64)]
    """The most fine-tuning seeds F the design of finding (a) may ask for
    (gpt1.report.design.choose_seeds: the smallest F with `power` at `declared_effect`)."""
    plan_commit: str | None
    """The commit that fixed the plan; null = the commit that last touched docs/study.md."""
    deviations: StrTuple
    """Deviations from the plan (docs/study.md), printed in the report."""

    @model_validator(mode="after")
    def _columns_defined(self) -> ReportCfg:
        labels = {c for t in self.paper.values() for c in t}
        labels |= {c for r in self.paper_ablations.values() for c in r if c != "Avg"}
        missing = sorted(labels - set(self.columns))
        if missing:
            raise ValueError(f"report.columns: no definition for {missing}")
        bad = [t for t in self.confirmatory_tasks if t not in TASKS]
        if bad:
            raise ValueError(f"report.confirmatory_tasks: unknown task {bad[0]!r}")
        for key, names in (("zeroshot_weights", self.zeroshot_weights),
                           ("zeroshot_floors", self.zeroshot_floors)):
            bad = sorted(set(names) - set(ZEROSHOT_TASKS))
            if bad:
                raise ValueError(f"report.{key}: {bad} are not zero-shot tasks")
        unlabelled = sorted(set(self.paper_ablations) - set(self.row_labels))
        if unlabelled:
            raise ValueError(f"report.row_labels: no label for {unlabelled}")
        return self


class GenerateCfg(Section):
    """`gpt1 generate`: sampling from the pre-trained LM (not a pipeline stage)."""

    max_new_tokens: PosInt
    """Tokens sampled after the prompt (the context keeps the last model.n_positions)."""
    temperature: PosFloat
    """Logits are divided by it before sampling (1 = the model's distribution)."""
    top_k: NonNegInt
    """Sample among the k most likely tokens; 0 = the whole vocabulary."""


class Params(Section):
    """The whole params file."""

    seed: NonNegInt
    device: Literal["auto", "cpu", "cuda"]
    """Where the model stages run (gpt1/runtime.py): `cuda` = this process's GPU (LOCAL_RANK
    under torchrun), and a stop at the start of a model stage when torch sees none; `cpu`;
    `auto` = the GPU when torch sees one, else the CPU. Data stages and the report use the CPU."""
    paths: Paths
    data: DataCfg
    clean: CleanCfg
    checks: ChecksCfg
    bpe: BpeCfg
    shard: ShardCfg
    model: ModelCfg
    lstm: LstmCfg
    pretrain: PretrainCfg
    finetune: FinetuneCfg
    tasks: TasksCfg
    tracking: TrackingCfg
    orchestrate: OrchestrateCfg
    ablations: AblationsCfg
    layers: LayersCfg
    curves: CurvesCfg
    zeroshot: ZeroShotCfg
    report: ReportCfg
    generate: GenerateCfg

    @model_validator(mode="after")
    def _cross_checks(self) -> Params:
        if self.pretrain.cuda_graphs and not self.pretrain.compile:
            raise ValueError("pretrain.cuda_graphs: true needs pretrain.compile: true (the "
                             "graphs are torch.compile's mode reduce-overhead)")
        if self.pretrain.cuda_graphs and self.device == "cpu":
            raise ValueError("pretrain.cuda_graphs: true needs a GPU, and device is cpu")
        if self.pretrain.seq_len > self.model.n_positions:
            raise ValueError(
                f"pretrain.seq_len: {self.pretrain.seq_len} exceeds model.n_positions="
                f"{self.model.n_positions}"
            )
        for key, names in (("finetune.tasks", self.finetune.tasks),
                           ("ablations.tasks", self.ablations.tasks),
                           ("layers.tasks", self.layers.tasks),
                           ("tasks.dev_examples", tuple(self.tasks.dev_examples))):
            bad = [t for t in names if t not in TASKS]
            if bad:
                raise ValueError(f"{key}: unknown task {bad[0]!r}; known: {sorted(TASKS)}")
        # every task named elsewhere is one a prepare_task stage prepares (one per
        # finetune.tasks); DPRD the zero-shot stage reads from the mirror itself
        prepared = set(self.finetune.tasks)
        for key, names in (("zeroshot.tasks", tuple(t for t in self.zeroshot.tasks
                                                     if t != "dprd")),
                           ("layers.tasks", self.layers.tasks),
                           ("ablations.tasks", self.ablations.tasks),
                           ("report.confirmatory_tasks", self.report.confirmatory_tasks)):
            bad = [t for t in names if t not in prepared]
            if bad:
                raise ValueError(f"{key}: {bad[0]!r} is not prepared by any stage (prepare_task "
                                 f"runs for finetune.tasks {list(self.finetune.tasks)}); add "
                                 "it there or drop it here")
        self._check_curves()
        self._check_floor()
        ungated = [t for t in self.report.confirmatory_tasks if t not in self.report.gate_margins]
        if ungated:
            raise ValueError(f"report.gate_margins: no margin for confirmatory task "
                             f"{ungated[0]!r}")
        unknown = set(self.finetune.overrides) - set(self.finetune.tasks)
        if unknown:
            raise ValueError(f"finetune.overrides: tasks not in finetune.tasks: {sorted(unknown)}")
        unknown = set(self.tasks.truncation_overrides) - set(self.finetune.tasks)
        if unknown:
            raise ValueError(
                f"tasks.truncation_overrides: tasks not in finetune.tasks: {sorted(unknown)}")
        unknown = set(self.tasks.fresh_examples) - set(self.finetune.tasks)
        if unknown:
            raise ValueError(f"tasks.fresh_examples: {sorted(unknown)[0]!r} is not in "
                             f"finetune.tasks {list(self.finetune.tasks)} (no prepare_task "
                             "stage carves it)")
        unknown = set(self.tasks.scored_ids) - set(self.tasks.fresh_examples)
        if unknown:
            raise ValueError(f"tasks.scored_ids: {sorted(unknown)[0]!r} has no "
                             "tasks.fresh_examples (the ids only keep rows out of a fresh split)")
        return self

    def _check_curves(self) -> None:
        curves, arms = self.curves, {"full", *self.ablations.presets}
        bad = [t for t in curves.tasks if t not in self.ablations.tasks]
        if bad:
            raise ValueError(f"curves.tasks: {bad[0]!r} not in ablations.tasks "
                             f"{list(self.ablations.tasks)} (whose pilots tune the arms)")
        bad = [a for a in curves.arms if a not in arms]
        if bad:
            raise ValueError(f"curves.arms: unknown arm {bad[0]!r}; known: {sorted(arms)}")
        kept = self.pretrain.zero_shot_checkpoints
        bad_k = [k for k in curves.checkpoints if k >= kept]
        if bad_k:
            raise ValueError(f"curves.checkpoints: index {bad_k[0]} >= "
                             f"pretrain.zero_shot_checkpoints ({kept})")
        self._check_dose()

    def _check_dose(self) -> None:
        """The dose curve: budgets below the main run's that leave its own decay after the
        warm-up, on tasks whose `full` and `scratch` rows are piloted (dose 0 and the top)."""
        curves, pre = self.curves, self.pretrain
        if bool(curves.dose_tokens) != bool(curves.dose_tasks):
            raise ValueError("curves.dose_tokens: the dose curve needs both dose_tokens and "
                             f"dose_tasks, or neither (got {list(curves.dose_tokens)} and "
                             f"{list(curves.dose_tasks)})")
        if not curves.dose_tokens:
            return
        if len(curves.dose_tokens) < 2:
            raise ValueError(f"curves.dose_tokens: at least two budgets below the main run's "
                             f"(three with it), got {list(curves.dose_tokens)}")
        if pre.max_tokens is None or pre.import_hf is not None:
            raise ValueError("curves.dose_tokens: the dose curve pre-trains runs of its own "
                             "beside the main one, which needs pretrain.max_tokens (not epochs) "
                             "and no pretrain.import_hf")
        if curves.dose_tokens[-1] >= pre.max_tokens:
            raise ValueError(f"curves.dose_tokens: {curves.dose_tokens[-1]} is not below "
                             f"pretrain.max_tokens ({pre.max_tokens}), the main run, which is "
                             "the curve's top dose")
        per_update = pre.batch_seqs * pre.seq_len
        if curves.dose_tokens[0] // per_update <= pre.warmup_steps:
            raise ValueError(f"curves.dose_tokens: {curves.dose_tokens[0]} tokens are "
                             f"{curves.dose_tokens[0] // per_update} updates of {per_update}, "
                             f"not more than pretrain.warmup_steps ({pre.warmup_steps}): the "
                             "run would end in its warm-up")
        bad = [t for t in curves.dose_tasks if t not in self.ablations.tasks]
        if bad:
            raise ValueError(f"curves.dose_tasks: {bad[0]!r} not in ablations.tasks "
                             f"{list(self.ablations.tasks)} (Table 5's full and scratch rows "
                             "are the curve's top dose and dose 0)")
        abl = self.ablations
        if SCRATCH_ARM not in abl.variants or {FULL_ARM, SCRATCH_ARM} - set(abl.pilot.variants):
            raise ValueError("curves.dose_tokens: the dose curve needs ablations.variants to "
                             f"list {SCRATCH_ARM!r} and ablations.pilot.variants to list "
                             f"{FULL_ARM!r} and {SCRATCH_ARM!r}: every dose at its own pilot's "
                             "choice")
        if abl.presets[SCRATCH_ARM].init != "scratch":
            raise ValueError(f"curves.dose_tokens: dose 0 is ablations.presets.{SCRATCH_ARM}, "
                             "whose init must be scratch (no pre-training)")

    def _check_floor(self) -> None:
        """The floor's min_df is at most the fewest training texts it fits on where params fix
        that number (a cap of ablations.tasks, a curve's n): an n-gram can be in no more."""
        sizes: dict[int, str] = {}
        for task in self.ablations.tasks:
            spec = TASKS[task]
            if spec.regression or spec.fmt == "choice":
                continue  # the floor records that it does not apply
            over = self.finetune.overrides.get(task)
            cap = (over.max_train_examples if over is not None else None) \
                or self.finetune.max_train_examples
            if cap is not None:
                sizes.setdefault(cap, f"the capped training sample of {task} "
                                      "(finetune.max_train_examples)")
            if task in self.curves.tasks:
                for n in self.curves.ns:
                    sizes.setdefault(n, f"curve_floor@{task}-{n} (curves.ns)")
        if sizes and self.ablations.floor.min_df > min(sizes):
            fewest = min(sizes)
            raise ValueError(f"ablations.floor.min_df: {self.ablations.floor.min_df} exceeds the "
                             f"{fewest} training texts of {sizes[fewest]}; no n-gram can be in "
                             f"more than {fewest}")

    def as_dict(self) -> dict[str, Any]:
        """Plain-JSON view, recorded in every artifact for provenance."""
        return self.model_dump(mode="json")

    def digest(self) -> str:
        """Short hash of the full params dict (the "config hash" in reports)."""
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads `1e-4` as a float, as YAML 1.2 (and DVC's ruamel) does."""


def _unique_keys_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    """A mapping whose keys are all distinct: PyYAML keeps the last of a key written twice,
    which silently drops the first value."""
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)  # type: ignore[no-untyped-call]
        line = key_node.start_mark.line + 1
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} written twice (lines {seen[key]} and {line})",
                key_node.start_mark)
        seen[key] = line
    return loader.construct_mapping(node)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_keys_mapping)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
        r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
          type(None): "null"}


def _accepted_form(ann: Any) -> str:
    """One member of a union annotation in words: 'auto', an integer > 0, null."""
    if get_origin(ann) is Literal:
        return " or ".join(repr(a) for a in get_args(ann))
    if get_origin(ann) is Annotated:
        base, *extra = get_args(ann)
        bounds = [f"{_BOUNDS[name]} {getattr(m, name)}" for info in extra
                  for m in getattr(info, "metadata", []) for name in _BOUNDS
                  if getattr(m, name, None) is not None]
        return " ".join([_accepted_form(base), *bounds])
    return _KINDS.get(ann, getattr(ann, "__name__", str(ann)))


def _union_field(model: type[BaseModel], loc: list[str]) -> tuple[list[str], Any] | None:
    """(the field's own loc, its annotation) when `loc` ends inside a union-typed field (its
    last parts are pydantic's tags of the union's members), else None."""
    ann: Any = model
    for n, part in enumerate(loc):
        if isinstance(ann, type) and issubclass(ann, BaseModel) and part in ann.model_fields:
            ann = ann.model_fields[part].annotation
            continue
        members = [a for a in get_args(ann) if a is not type(None)]
        if get_origin(ann) in (typing.Union, types.UnionType) and len(members) > 1:
            return loc[:n], ann
        return None
    return None


def _format_error(path: Path, err: ValidationError, model: type[BaseModel]) -> str:
    errors = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    union = _union_field(model, [str(p) for p in first["loc"]])
    if union is not None:  # one line for the field, every form it accepts named
        key = ".".join(union[0])
        forms = " or ".join(_accepted_form(a) for a in get_args(union[1]))
        shown = json.dumps(first["input"], default=str)
        return f"{path}: {key}: {shown} is not accepted; {key} takes {forms}"
    loc = [str(p) for p in first["loc"] if not str(p).startswith("function-after")]
    key, msg = ".".join(loc), first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key" + _did_you_mean(model, loc)
    elif first["type"] == "missing":
        msg = "missing key"
    elif first["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
        if ": " in msg:  # a model validator's message names its own key
            key, _, msg = msg.partition(": ")
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{path}: {key}: {msg}{more}"


def _did_you_mean(model: type[BaseModel], loc: list[str]) -> str:
    """Suggest the closest valid key for a misspelled one."""
    for part in loc[:-1]:
        field = model.model_fields.get(part)
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return ""
        model = ann
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_params(raw: Any, source: Path | str = "<params>") -> Params:
    """Validate an already-parsed params mapping; ParamsError names the first bad key."""
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: top level must be a mapping, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise ParamsError(_format_error(Path(source), err, Params)) from None


def read_yaml(path: Path) -> Any:
    """A YAML file as params are read (YAML 1.2 floats such as `1e-05`, as dvc.lock writes
    them; a key written twice refused)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 (SafeLoader subclass)


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and strictly validate a params file."""
    path = Path(path)
    try:
        raw = read_yaml(path)
    except FileNotFoundError:
        raise ParamsError(f"{path}: params file not found") from None
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    return parse_params(raw, path)


def override(params: Params, **sections: dict[str, Any]) -> Params:
    """params with some keys of some sections replaced, validated again like a params file."""
    raw = params.as_dict()
    for section, values in sections.items():
        raw[section] = {**raw[section], **values}
    return parse_params(raw, "<override>")
