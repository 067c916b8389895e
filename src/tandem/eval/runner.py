"""The QA evaluation runner: questions in flight concurrently, each finished one appended to
``predictions.jsonl`` at once (so a killed run resumes without losing or repeating a question),
failures recorded per question, metrics and a markdown table at the end.

Faults (docs/reliability.md): any exception inside one question is recorded for that question (type
and message in its record, the traceback in ``errors.log``) and the run goes on. A question whose LLM
server could not be reached is not written as done, so the next run retries it; after
``max_consecutive_failures`` of those in a row the run stops (:class:`~tandem.errors.RunError`).
Ctrl-C stops handing out questions, writes the metrics of what finished (``"partial": true``) and
re-raises. Workers are daemon threads: requests still in flight do not hold the process up."""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tandem.config import normalise_run_config
from tandem.errors import ConfigError, DataError, LLMError, RunError, WriteError
from tandem.eval.codecheck import keep_code
from tandem.eval.judge import (
    REANSWER_PROMPT,
    ReanswerPrompt,
    calibrate_judge,
    judge_label,
    reanswer_template,
    score_prediction,
)
from tandem.eval.qa_metrics import gold_doc_recall
from tandem.eval.rundir import CONFIG_FILE, PREDICTIONS, RunDir
from tandem.io import atomic_open, write_error, write_json_atomic
from tandem.llm.base import LLM
from tandem.methods.base import Method
from tandem.secrets import redact
from tandem.types import REUSE_KEYS, Question, Step, merge_protocol, protocol_counts

ERRORS_LOG = "errors.log"
log = logging.getLogger(__name__)

# settings that must match for a run folder to be resumed
RESUME_KEYS = ("method", "dataset", "index", "retriever", "llm", "settings", "judge", "reanswer", "reanswer_prompt")
# of those, files: the same where their absolute paths (the config's notes ``KEY_path``) are, however spelled
RESUME_PATHS = ("dataset", "index")
JUDGE_CALIBRATION = "judge-calibration.json"


def _same_file(old: dict[str, Any], new: dict[str, Any], key: str) -> bool:
    """Whether two run configs' ``key`` (a :data:`RESUME_PATHS` entry) name one file in other spellings:
    both record its absolute path in their notes (runs from before that compare the spellings)."""
    paths = [(c.get("notes") or {}).get(f"{key}_path") for c in (old, new)]
    return key in RESUME_PATHS and paths[0] is not None and paths[0] == paths[1]


def read_finished(path: Path) -> dict[str, dict[str, Any]]:
    """The complete records of a predictions file that may still be written to, by id: the read-only
    counterpart of :func:`load_done` (which repairs the file for the run that owns it). A last line
    without its newline is a record being written and is left out."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    records = {}
    for line_no, line in enumerate(lines, start=1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise DataError("not a prediction record (malformed JSON)", str(path), line_no) from None
        records[rec["id"]] = rec
    return records


def load_done(path: Path) -> dict[str, dict[str, Any]]:
    """Records already in ``predictions.jsonl``. Only a torn last line (a run killed mid-write: no
    newline, not JSON) is cut off; any other unreadable line is a DataError naming it, and nothing
    is deleted."""
    if not path.exists():
        return {}
    done: dict[str, dict[str, Any]] = {}
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for line_no, line in enumerate(lines, start=1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if line_no == len(lines) and not line.endswith("\n"):
                with atomic_open(path) as handle:
                    handle.writelines(lines[:-1])
                log.warning("%s:%d: cut 1 torn last line (%d bytes; a run stopped while writing it): its question "
                            "runs again", path, line_no, len(line.encode("utf-8")))
                break
            raise DataError("not a prediction record (malformed JSON); fix or remove the line", str(path), line_no) from None
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
            raise DataError("not a prediction record (no string 'id')", str(path), line_no)
        done[rec["id"]] = rec
    if lines and lines[-1].endswith("}") and not lines[-1].endswith("\n"):
        with open(path, "a", encoding="utf-8") as handle:  # a whole last record without its newline
            handle.write("\n")
    return done


class PredictionWriter:
    """Appends one JSON line per finished question, flushed and fsynced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record``; a full disk or a read-only folder is a WriteError saying how to resume (a
        torn last line is cut on resume)."""
        try:
            self.handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.handle.flush()
            os.fsync(self.handle.fileno())
        except OSError as exc:
            error = write_error(exc, self.path, "predictions")
            if error is None:
                raise
            raise WriteError(f"{error}; the questions finished before are saved there: free space and run the "
                             "same command again to resume") from exc

    def close(self) -> None:
        """Close the file; what a failed write left in the buffer is dropped (the line is torn anyway)."""
        try:
            self.handle.close()
        except OSError as exc:
            if write_error(exc, self.path) is None:
                raise


def run_one(method: Method, question: Question, *, judge_llm: LLM | None, reanswer_llm: LLM | None,
            reanswer_prompt: ReanswerPrompt = REANSWER_PROMPT) -> dict[str, Any]:
    """Answer and score one question; any exception becomes an error record (with ``traceback``, which
    the runner moves to ``errors.log``), never a crash."""
    start = time.perf_counter()
    record: dict[str, Any] = {"id": question.id, "question": question.text, "golden_answers": list(question.answers)}
    try:
        answer = method.answer(question)
        judging = Step("judge")
        scores, rewritten = score_prediction(question.text, answer.text, question.answers,
                                             judge_llm=judge_llm, reanswer_llm=reanswer_llm, step=judging,
                                             reanswer_prompt=reanswer_prompt)
        recall = gold_doc_recall(question.gold_doc_ids, answer.trace.docs_read)
        record.update({
            "prediction": answer.text, "reanswer": rewritten, "scores": scores,
            "gold_doc_recall": recall, "llm_calls": len(answer.trace.llm_calls), "tokens": answer.trace.tokens,
            "protocol": merge_protocol([answer.trace.protocol(), protocol_counts(judging.llm_calls)]),
            "reuse": answer.trace.reuse(),
            "seconds": round(time.perf_counter() - start, 3), "trace": answer.trace.to_dict(),
        })
    except Exception as exc:  # noqa: BLE001 - one question's failure, whatever it is, must not end the run
        record.update({"error": redact(f"{type(exc).__name__}: {exc}"), "traceback": redact(traceback.format_exc()),
                       "seconds": round(time.perf_counter() - start, 3)})
        if isinstance(exc, LLMError) and exc.unreachable:
            record["unreachable"] = exc.kind  # "connect" or "timeout"
    return record


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean metrics over answered questions, plus cost per question and the error count."""
    ok = [r for r in records if "error" not in r]
    metrics: dict[str, Any] = {"questions": len(records), "answered": len(ok), "errors": len(records) - len(ok),
                               "unreachable": sum(1 for r in records if r.get("unreachable"))}
    if not ok:
        return metrics
    for key in ok[0]["scores"]:
        metrics[key] = sum(r["scores"][key] for r in ok) / len(ok)
    recalls = [r["gold_doc_recall"] for r in ok if r["gold_doc_recall"] is not None]
    if recalls:
        metrics["gold_doc_recall"] = sum(recalls) / len(recalls)
    for key in ("llm_calls", "tokens", "seconds"):
        metrics[f"{key}_per_q"] = sum(r[key] for r in ok) / len(ok)
    metrics.update(protocol_health([r.get("protocol") or {} for r in ok]))
    metrics.update(prefix_reuse([r.get("reuse") or {} for r in ok]))
    return metrics


def prefix_reuse(rows: Sequence[dict[str, dict[str, int]]]) -> dict[str, Any]:
    """Run-level prefix reuse: the share of prompt tokens the backend took from its prefix cache, overall
    (``reused_token_share``) and per role (``reuse``). Empty where the backend reported none."""
    per_role = merge_protocol(list(rows), keys=REUSE_KEYS)
    prompt = sum(c["prompt_tokens"] for c in per_role.values())
    reused = sum(c["reused_tokens"] for c in per_role.values())
    if not reused or not prompt:
        return {}
    return {"reused_token_share": reused / prompt,
            "reuse": {role: {**c, "share": round(c["reused_tokens"] / c["prompt_tokens"], 4) if c["prompt_tokens"] else 0.0}
                      for role, c in per_role.items()}}


def protocol_health(rows: Sequence[dict[str, dict[str, int]]]) -> dict[str, Any]:
    """Run-level protocol health: per-role counts, and over all marked exchanges (structured ones and the text
    replies a method reads for a marker or an answer: :func:`tandem.methods.base.mark_exchange`)
    ``fallback_rate`` (fell back / exchanges) and ``parse_rate`` (parsed from the first reply, strictly /
    exchanges). Empty when the method marks no exchange."""
    per_role = merge_protocol(list(rows))
    calls = sum(c["calls"] for c in per_role.values())
    if not calls:
        return {}
    return {
        "structured_calls": calls,
        "fallback_rate": sum(c["fell_back"] for c in per_role.values()) / calls,
        "parse_rate": sum(c["parsed_first"] for c in per_role.values()) / calls,
        "schema_decoded_rate": sum(c["schema_decoded"] for c in per_role.values()) / calls,
        "protocol": per_role,
    }


def run_qa(
    method: Method,
    questions: Sequence[Question],
    out_dir: str | Path,
    config: dict[str, Any],
    *,
    concurrency: int = 1,
    judge_llm: LLM | None = None,
    reanswer_llm: LLM | None = None,
    reanswer_prompt: str = "brief",
    calibrate: int = 100,
    self_judged: bool = False,
    retry_errors: bool = False,
    allow_code_change: bool = False,
    max_consecutive_failures: int = 3,
    on_record: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run ``method`` over ``questions`` into ``out_dir``, resuming what is already there (see module doc).

    ``reanswer_prompt`` names the re-answer prompt (:data:`tandem.eval.judge.REANSWER_PROMPTS`). With a judge,
    a finished run calibrates it on the first ``calibrate`` questions (:func:`tandem.eval.judge.calibrate_judge`,
    kept in ``judge-calibration.json``) and records the result in metrics.json; ``self_judged`` says the
    judge is the method's own LLM. The method's code is checked against the code that made the answers saved
    so far (:func:`tandem.eval.codecheck.keep_code`; ``allow_code_change`` records a change instead of refusing)."""
    run = RunDir(out_dir, "qa-run")
    if (run.folder / CONFIG_FILE).exists():
        old, new = normalise_run_config(run.read_config()), normalise_run_config(config)
        changed = [k for k in RESUME_KEYS if (old.get(k) or None) != (new.get(k) or None) and not _same_file(old, new, k)]
        if changed:
            raise ConfigError(f"{out_dir} holds a run with other settings ({', '.join(changed)}): use another --out")
    path = run.folder / PREDICTIONS
    code = keep_code(run.folder, method, len(read_finished(path)) if path.is_file() else 0, allow_code_change)
    run.write_config(config)
    done = load_done(path)
    if retry_errors and any("error" in r for r in done.values()):
        done = {k: r for k, r in done.items() if "error" not in r}
        with atomic_open(path) as handle:
            handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in done.values())
    todo: queue.SimpleQueue[Question] = queue.SimpleQueue()
    pending = [q for q in questions if q.id not in done]
    for q in pending:
        todo.put(q)
    results: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    stop = threading.Event()
    template = reanswer_template(reanswer_prompt, [q.answers for q in questions])

    def worker() -> None:
        while not stop.is_set():
            try:
                question = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results.put(run_one(method, question, judge_llm=judge_llm, reanswer_llm=reanswer_llm,
                                    reanswer_prompt=template))
            except BaseException as exc:  # noqa: BLE001 - a dying worker still reports its question
                results.put({"id": question.id, "question": question.text, "golden_answers": list(question.answers),
                             "error": redact(f"{type(exc).__name__}: {exc}"), "seconds": 0.0})
                raise

    for _ in range(min(max(1, concurrency), len(pending))):
        threading.Thread(target=worker, daemon=True, name="tandem-question").start()
    records = [done[q.id] for q in questions if q.id in done]
    writer = PredictionWriter(path)
    streak, finished, stopped, calibration, failing = 0, 0, None, None, False
    try:
        while finished < len(pending):
            try:
                record = results.get(timeout=0.25)
            except queue.Empty:
                continue
            finished += 1
            if "traceback" in record:
                _log_error(run.folder / ERRORS_LOG, record.pop("traceback"), record["id"])
            if not record.get("unreachable"):  # an unreachable server's questions stay pending for the next run
                writer.write(record)
            records.append(record)
            streak = streak + 1 if record.get("unreachable") else 0
            if on_record is not None:
                on_record(record, summarize(records))
            if max_consecutive_failures and streak >= max_consecutive_failures:
                stopped = (f"stopped after {streak} questions in a row could not reach the LLM server (last: "
                           f"{record['error']}); the {len(records) - streak} finished questions are saved in "
                           f"{path}: run the same command again to resume"
                           + ("; if the server is busy rather than down (many questions at once on a CPU), give "
                              "each reply longer: --llm-opt timeout=SECONDS (default 60)"
                              if record["unreachable"] == "timeout" else ""))
                break
        if judge_llm is not None and not stopped and calibrate:
            calibration = _calibration(run.folder / JUDGE_CALIBRATION, judge_llm, questions, records, calibrate,
                                       self_judged, concurrency)
    except BaseException as exc:
        stopped = "interrupted" if isinstance(exc, KeyboardInterrupt) else redact(f"{type(exc).__name__}: {exc}")
        failing = True
        raise
    finally:
        stop.set()
        writer.close()
        wanted = {q.id for q in questions}
        metrics = summarize([r for r in records if r["id"] in wanted])
        metrics["method"] = config.get("method")
        if code["changes"]:
            metrics["code_changes"] = code["changes"]  # answers made by more than one version of the method
        if calibration is not None:
            metrics["judge_calibration"] = calibration
        if stopped:
            metrics.update({"partial": True, "stopped": stopped, "pending": len(wanted) - metrics["questions"]})
        try:
            run.write_metrics(metrics, [metrics_row(metrics)], f"QA: {config.get('method')} on "
                              f"{Path(str(config.get('dataset'))).name}" + (" (partial)" if stopped else ""))
        except WriteError:
            if not failing:  # else the error on its way out says more (a full disk fails both writes)
                raise
    if stopped:
        raise RunError(stopped)
    return metrics


def _calibration(path: Path, judge_llm: LLM, questions: Sequence[Question], records: Sequence[dict[str, Any]],
                 limit: int, self_judged: bool, concurrency: int = 1) -> dict[str, Any]:
    """The judge's calibration (kept in ``path``: a resumed finished run does not ask again)."""
    if path.exists():
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("limit") == limit and kept.get("self_judged") == self_judged:
            return kept
    answered = [r for r in records if "error" not in r]
    result = {"limit": limit, **calibrate_judge(judge_llm, [(q.text, q.answers) for q in questions], answered,
                                                limit=limit, self_judged=self_judged, concurrency=concurrency)}
    write_json_atomic(path, result)
    return result


def _log_error(path: Path, trace: str, question_id: str) -> None:
    """Append one question's traceback to the run's ``errors.log``."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} question {question_id}\n{trace}\n")


def metrics_row(metrics: dict[str, Any]) -> dict[str, Any]:
    """The columns of the markdown table, in the papers' order."""
    cols = ("method", "questions", "errors", "em", "f1", "acc", "judge", "rouge_l", "gold_doc_recall",
            "llm_calls_per_q", "tokens_per_q", "seconds_per_q", "parse_rate", "fallback_rate")
    row = {c: metrics[c] for c in cols if c in metrics}
    if "judge" in row:
        row["judge"] = judge_label(metrics)
    return row
