"""`dvc plots show`: one colour per series (the 8 zero-shot curves), one dash per revision."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.repo import REPO

DVC = str(Path(sys.executable).with_name("dvc"))
CATEGORY10 = 10  # colours in Vega's category10 scheme


def test_each_zero_shot_series_gets_its_own_colour() -> None:
    shown = subprocess.run([DVC, "plots", "show", "--json", "figure2_right"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout
    (plot,) = json.loads(shown)["data"]["figure2_right"]
    spec = plot["content"]
    (series,) = [t for t in spec["transform"] if t.get("as") == "series"]
    assert "datum.filename" in series["calculate"] and "datum.field" in series["calculate"]
    assert spec["encoding"]["color"]["field"] == "series"
    assert spec["encoding"]["color"]["scale"]["scheme"] == "category10"
    assert spec["encoding"]["strokeDash"]["field"] == "rev"
    curves = {(row["filename"], row["field"]) for row in spec["data"]["values"]}
    assert len(curves) == 8, curves  # transformer and LSTM x sst2, cola, race, dprd
    assert len(curves) <= CATEGORY10
