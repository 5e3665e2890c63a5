"""The CPU a record names: model name and widest instruction set from a cpuinfo file, stamped on
every stage record, named in the report's banner and in the benchmarks' results files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpt1 import hardware, records
from gpt1.errors import Gpt1Error
from gpt1.records import StageContext
from gpt1.report.document import banner, hardware_line

XEON = "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"


def _cpuinfo(tmp_path: Path, flags: str, model: str | None = XEON) -> str:
    path = tmp_path / "cpuinfo"
    name = f"model name\t: {model}\n" if model else ""
    path.write_text(f"processor\t: 0\n{name}flags\t\t: fpu {flags}\n\nprocessor\t: 1\n"
                    f"{name}flags\t\t: fpu\n")
    return str(path)


@pytest.mark.parametrize(("flags", "isa"), [
    ("avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "AMX"),
    ("avx2 avx512f avx512_bf16", "AVX512-BF16"),
    ("avx2 avx512f", "AVX512"),
    ("sse4_2 avx2", "AVX2"),
    ("sse4_2", "no AVX2"),
])
def test_the_widest_instruction_set_is_named(tmp_path, flags, isa) -> None:
    cpu = hardware.describe_cpu(_cpuinfo(tmp_path, flags))
    assert cpu == hardware.Cpu(XEON, isa)  # the first processor's lines
    assert cpu.text() == f"{XEON} ({isa})"
    assert cpu.as_record() == {"model": XEON, "isa": isa}


def test_a_cpuinfo_without_a_model_or_at_all_still_names_something(tmp_path) -> None:
    assert hardware.describe_cpu(_cpuinfo(tmp_path, "avx2", model=None)).model
    missing = hardware.describe_cpu(str(tmp_path / "missing"))
    assert missing.isa == hardware.NO_AVX2 and missing.model


def test_every_stage_record_carries_the_cpu_it_ran_on(tiny_params) -> None:
    context = StageContext.of("finetune", "finetune", tiny_params, time.perf_counter(), None)
    records.write_metrics(tiny_params, "finetune_sst2", {"task": "sst2", "scores": {}},
                          ("scores",), context.stamp())
    record = records.read_metrics(tiny_params.paths.metrics)["finetune_sst2"]
    assert record["hardware"] == hardware.describe_cpu().as_record()


def test_a_damaged_hardware_field_is_refused(tiny_params) -> None:
    path, info = records.record_paths(tiny_params.paths.metrics, "pretrain")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"steps": 1}))
    info.write_text(json.dumps({"hardware": "a Xeon"}))
    with pytest.raises(Gpt1Error, match="field 'hardware'"):
        records.read_metrics(tiny_params.paths.metrics)


def test_the_banner_names_each_cpu_of_the_records(tiny_params) -> None:
    amx, avx2 = {"model": XEON, "isa": "AMX"}, {"model": "AMD EPYC 7B13", "isa": "AVX2"}
    metrics = {"pretrain": {"hardware": amx}, "finetune_sst2": {"hardware": amx},
               "finetune_cola": {"hardware": avx2}, "download_corpus": {}}
    line = hardware_line(metrics)
    assert line == [f"> Made on: {XEON} (AMX), 2 of 4 stage records; AMD EPYC 7B13 (AVX2), 1 "
                    "of 4 stage records; 1 records name no CPU (written before the field) (the "
                    "records' `hardware` field: model name and widest instruction set)."]
    assert line[0] in banner(tiny_params, metrics)
    assert hardware_line({"pretrain": {}}) == []  # older records: no line (the golden report)


def test_the_benchmarks_results_files_name_the_cpu_as_the_records_do() -> None:
    import results_file  # benchmarks/ (pytest's pythonpath)

    assert results_file.cpu_model() == hardware.describe_cpu().text()
