"""benchmarks/answers_rule.py: the answers rule's verdict from two arms' run folders, per kind of CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import benchmark_script

rule = benchmark_script("answers_rule")


def _arm(folder: Path, f1s: list[float], cpu: str = "amx") -> None:
    """A run folder with one prediction per F1 (EM 1 where F1 is 1) and the engine note of ``cpu``."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"notes": {"llm_engine": f"openvino m, dtype=float32, cpu={cpu}"}}))
    with (folder / "predictions.jsonl").open("w") as fh:
        for i, f1 in enumerate(f1s):
            scores = {"em": float(f1 == 1.0), "f1": f1, "acc": float(f1 > 0)}
            fh.write(json.dumps({"id": f"q{i}", "prediction": f"a{f1}", "scores": scores}) + "\n")


def _report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str = "dtype=bfloat16") -> dict:
    monkeypatch.setattr(rule, "cpu_kind", lambda: "amx")
    rule.main(["--setting", setting, "--halves", "naive_rag", "--report", "--root", str(tmp_path), "--index", str(tmp_path)])
    return json.loads((tmp_path / "local" / "amx" / f"verdict-{rule.slug(setting)}.naive_rag.json").read_text())


def test_identical_arms_pass_and_the_rule_asks_for_both_halves(tmp_path, monkeypatch, capsys) -> None:
    f1s = [1.0, 0.5, 0.0, 0.25] * 50
    base = tmp_path / "local" / "amx" / "naive_rag"
    _arm(base / "f32", f1s)
    _arm(base / "dtype-bfloat16", f1s)
    verdict = _report(tmp_path, monkeypatch)
    half = verdict["halves"]["naive_rag"]
    assert (half["questions"], half["identical"], half["complete"], half["holds"]) == (200, 200, True, True)
    assert half["f1"]["low"] == half["f1"]["high"] == 0.0
    assert verdict["cpu"] == "amx" and verdict["holds"] is False        # one half of two: not the rule's verdict
    assert "the halves shown hold; the rule asks for both (not shown: dualrag)" in capsys.readouterr().out
    _arm(base.parent / "dualrag" / "f32", f1s[:100])
    _arm(base.parent / "dualrag" / "dtype-bfloat16", f1s[:100])
    monkeypatch.setattr(rule, "cpu_kind", lambda: "amx")
    rule.main(["--setting", "dtype=bfloat16", "--report", "--root", str(tmp_path), "--index", str(tmp_path)])
    assert "verdict: the rule holds" in capsys.readouterr().out
    assert json.loads((tmp_path / "local" / "amx" / "verdict-dtype-bfloat16.json").read_text())["holds"] is True


def test_worse_answers_or_too_few_questions_do_not_pass(tmp_path, monkeypatch) -> None:
    base = tmp_path / "local" / "amx" / "naive_rag"
    _arm(base / "f32", [1.0] * 200)
    _arm(base / "dtype-bfloat16", [1.0] * 150 + [0.0] * 50)     # a quarter of the answers lost
    half = _report(tmp_path, monkeypatch)["halves"]["naive_rag"]
    assert half["complete"] and not half["holds"] and half["f1"]["low"] < -0.02

    other = tmp_path / "few"
    _arm(other / "local" / "amx" / "naive_rag" / "f32", [1.0] * 60)
    _arm(other / "local" / "amx" / "naive_rag" / "dtype-bfloat16", [1.0] * 60)
    half = _report(other, monkeypatch)["halves"]["naive_rag"]
    assert half["questions"] == 60 and not half["complete"] and not half["holds"]   # identical, but 60 of 200


def test_an_arm_from_another_kind_of_cpu_is_refused(tmp_path, monkeypatch) -> None:
    base = tmp_path / "local" / "amx" / "naive_rag"
    _arm(base / "f32", [1.0] * 10, cpu="avx512_bf16")
    _arm(base / "dtype-bfloat16", [1.0] * 10)
    with pytest.raises(SystemExit, match=r"f32/config.json: this arm ran on a 'avx512_bf16' CPU and this one is 'amx'"):
        _report(tmp_path, monkeypatch)


def test_a_missing_arm_and_bad_settings_are_named(tmp_path, monkeypatch) -> None:
    half = _report(tmp_path, monkeypatch)["halves"]["naive_rag"]
    assert half == {"note": "f32 not started, dtype-bfloat16 not started"}
    _arm(tmp_path / "local" / "amx" / "naive_rag" / "f32", [1.0] * 15)
    assert _report(tmp_path, monkeypatch)["halves"]["naive_rag"] == {"note": "f32 15 of 200, dtype-bfloat16 not started"}
    with pytest.raises(SystemExit, match="give KEY=VALUE options"):
        rule.main(["--setting", "bf16", "--plan"])
    with pytest.raises(SystemExit, match="is the f32 path itself"):
        rule.main(["--setting", "dtype=float32", "--plan"])
    with pytest.raises(SystemExit, match="no such index"):
        rule.main(["--setting", "dtype=bfloat16", "--index", str(tmp_path / "none"), "--root", str(tmp_path)])


def test_the_plan_names_both_arms_of_each_half(capsys) -> None:
    rule.main(["--setting", "dtype=bfloat16,prompt_lookup=4", "--plan"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(line.startswith("tandem eval qa --method") for line in lines)
    assert "--limit 200 --concurrency 4" in lines[0] and lines[0].endswith("--llm-opt dtype=float32")
    assert lines[3].endswith("dualrag/dtype-bfloat16+prompt_lookup-4 --llm-opt dtype=bfloat16 --llm-opt prompt_lookup=4")


def test_failed_questions_leave_a_half_incomplete_and_say_so(tmp_path, monkeypatch, capsys) -> None:
    base = tmp_path / "local" / "amx" / "naive_rag"
    _arm(base / "f32", [1.0] * 200)
    _arm(base / "dtype-bfloat16", [1.0] * 198)
    with (base / "dtype-bfloat16" / "predictions.jsonl").open("a") as fh:
        for i in (198, 199):
            fh.write(json.dumps({"id": f"q{i}", "error": "LLMError: engine stopped"}) + "\n")
    assert rule.finished(base / "dtype-bfloat16") == (200, 2)          # finished: no pointless rerun
    half = _report(tmp_path, monkeypatch)["halves"]["naive_rag"]
    assert half["questions"] == 198 and not half["holds"] and half["failed"] == {"f32": 0, "dtype-bfloat16": 2}
    assert "not yet (2 failed: run with --retry-errors)" in capsys.readouterr().out


def test_a_damaged_config_and_other_code_are_named(tmp_path, monkeypatch, capsys) -> None:
    base = tmp_path / "local" / "amx" / "naive_rag"
    _arm(base / "f32", [1.0] * 10)
    _arm(base / "dtype-bfloat16", [1.0] * 10)
    (base / "f32" / "code.json").write_text(json.dumps({"files": {"methods/naive.py": "aa"}}))
    (base / "dtype-bfloat16" / "code.json").write_text(json.dumps({"files": {"methods/naive.py": "bb"}}))
    assert _report(tmp_path, monkeypatch)["halves"]["naive_rag"]["code_differs"] == ["methods/naive.py"]
    assert "the arms ran other code of: methods/naive.py" in capsys.readouterr().out
    (base / "f32" / "config.json").write_text("{broken")
    with pytest.raises(SystemExit, match=r"f32/config.json: not a run's config"):
        _report(tmp_path, monkeypatch)


def test_an_arm_resumes_with_its_own_spelling_of_the_same_paths(tmp_path) -> None:
    run = tmp_path / "arm"
    _arm(run, [1.0])
    config = json.loads((run / "config.json").read_text())
    relative = str(Path("..") / rule.DATASET.relative_to(rule.ROOT.parent))          # ../shared/data/...
    (run / "config.json").write_text(json.dumps({**config, "dataset": relative, "index": "elsewhere"}))
    cmd = rule.arm_command(rule.HALVES["dualrag"], "local", (), rule.ROOT / "runs" / "dev500", run)
    assert cmd[cmd.index("--dataset") + 1] == relative                                  # the same file: kept
    assert cmd[cmd.index("--index") + 1] == str(rule.ROOT / "runs" / "dev500")          # another one: as given
