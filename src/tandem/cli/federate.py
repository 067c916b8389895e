"""``tandem federate``: CRAB bench building and CoRAG runs (collaborative on Flower, and baselines)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from tandem.cli.common import out, progress_bar
from tandem.outdir import owned_output

federate_app = typer.Typer(help="Collaborative RAG (CoRAG): CRAB benches, Flower simulation, baselines.",
                           no_args_is_help=True)

Opt = typer.Option


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"expected comma-separated integers, got {text!r}") from exc


@federate_app.command("build-bench")
def build_bench(
    dataset: Annotated[Path, Opt(help="QA set with gold passages (e.g. the NQ-open oracle JSONL.gz).")],
    out_dir: Annotated[Path, Opt("--out", help="Bench folder to write (replaced atomically).")],
    clients: Annotated[int, Opt(help="Number of clients.")] = 8,
    shots: Annotated[str, Opt(help="k-shot training sizes (nested prefixes).")] = "16,32,64",
    dev: Annotated[int, Opt(help="Dev questions per client.")] = 25,
    test: Annotated[int, Opt(help="Test questions per client.")] = 25,
    train_frac: Annotated[float, Opt(help="Share of the background pool in the training store (paper: 80%).")] = 0.8,
    test_frac: Annotated[float, Opt(help="Background share of each client's test store (paper: 2.5%).")] = 0.025,
    split_frac: Annotated[float, Opt(help="Background share of each SPLIT store (paper: 10%).")] = 0.1,
    encoder: Annotated[str, Opt(help="Frozen passage encoder the stores are indexed with.")] = "minilm",
    seed: Annotated[int, Opt()] = 0,
    fmt: Annotated[Optional[str], Opt("--format", help="Force the dataset format.")] = None,
) -> None:
    """Build a CRAB-style bench: clients, k-shot/dev/test splits, REL/IRR/REL-1/SPLIT stores, test stores."""
    from tandem.federated.bench_io import build_bench as build

    with owned_output(out_dir, "crab-bench"):
        start = time.monotonic()
        with progress_bar() as bar:
            manifest = build(dataset, out_dir, clients=clients, shots=_ints(shots), dev=dev, test=test, train_frac=train_frac,
                             test_frac=test_frac, split_frac=split_frac, encoder=encoder, seed=seed, fmt=fmt,
                             on_progress=bar.callback("encode passages"))
        table = Table(title=f"{out_dir}: {clients} clients, shots {manifest['shots']}, {time.monotonic() - start:.0f} s")
        for col in ("store", "passages", "hard negatives / train question"):
            table.add_column(col)
        for name, size in manifest["store_sizes"].items():
            table.add_row(name, str(size), str(manifest["hard_negatives_per_train_question"][name]))
        out.print(table)
        out.print("variants: " + "; ".join(f"{v}: {s}" for v, s in manifest["variants"].items()))


def _spec(bench: Path, variant: str, shots: int, clients: Optional[int], rounds: int, epochs: int, eval_limit: int,
          top_k: int, passage_tokens: int, answer_tokens: int, batch_size: int, lr_retriever: float, lr_reader: float,
          lora_layers: int, threads: Optional[int], eval_rounds: str, split: str, run_dir: Path, seed: int) -> Any:
    from tandem.federated.local import TrainSettings
    from tandem.federated.model import ModelConfig
    from tandem.federated.spec import RunSpec

    model = ModelConfig(top_k=top_k, passage_tokens=passage_tokens, max_answer_tokens=answer_tokens, lora_layers=lora_layers)
    train = TrainSettings(epochs=epochs, batch_size=batch_size, lr_retriever=lr_retriever, lr_reader=lr_reader, seed=seed)
    return RunSpec(bench=str(bench.resolve()), variant=variant, shots=shots, clients=clients, rounds=rounds,
                   eval_rounds=tuple(_ints(eval_rounds)), split=split, eval_limit=eval_limit or None, threads=threads,
                   out_dir=str(run_dir.resolve()), model=model, train=train)


def _report(metrics: dict[str, Any], run_dir: Path) -> None:
    table = Table(title=f"{metrics['mode']} ({metrics['variant']}, {metrics['shots']}-shot) -> {run_dir}")
    for col in ("EM", "F1", "hit@k", "questions", "minutes", "peak RSS GiB"):
        table.add_column(col)
    table.add_row(str(metrics.get("em_macro")), str(metrics.get("f1_macro")), str(metrics.get("hit@k_macro", "")),
                  str(metrics.get("questions")), f"{metrics['wall_seconds'] / 60:.1f}", str(metrics["peak_rss_gib"]))
    out.print(table)


def _run(mode: str, spec: Any, run_dir: Path, parallel: int, inprocess: bool) -> None:
    from tandem.eval.rundir import RunDir
    from tandem.federated import corag

    with owned_output(run_dir, "corag-run", replacing=False):
        if (run_dir / "metrics.json").exists():
            raise typer.BadParameter(f"{run_dir} already holds a finished run; choose another --out")
        rd = RunDir(run_dir, "corag-run")
        rd.write_config(corag.config_record(spec, mode, parallel=parallel, inprocess=inprocess))
        start = time.monotonic()
        with corag.PeakRSS() as rss:
            if mode == "collaborative" and not inprocess:
                result = corag.simulate(spec, parallel=parallel)
            else:
                with progress_bar() as bar:
                    if mode == "collaborative":
                        result = corag.collaborative(spec, rd, bar.labelled())
                    else:
                        result = corag.run_baseline(spec, mode, rd, bar.labelled())
        metrics = corag.finish(rd, spec, result, time.monotonic() - start, rss.peak_gib)
        _report(metrics, run_dir)


_MODE_HELP = "collaborative (CoRAG) | local | centralized | closed-book | zero-shot"


@federate_app.command("simulate")
def simulate(
    bench: Annotated[Path, Opt(help="Bench folder from `tandem federate build-bench`.")],
    run_dir: Annotated[Path, Opt("--out", help="Run folder to write.")],
    mode: Annotated[str, Opt(help=_MODE_HELP)] = "collaborative",
    variant: Annotated[str, Opt(help="Training-store variant: REL | IRR | REL-1 | SPLIT, or one of the paper's Table 2 compositions: REL-ONLY | HN+IRR | REL+HN | REL+IRR | TOP1+IRR.")] = "REL",
    shots: Annotated[int, Opt(help="Labelled pairs per client (a k-shot set of the bench).")] = 16,
    clients: Annotated[Optional[int], Opt(help="Use the first N clients of the bench (default: all).")] = None,
    rounds: Annotated[int, Opt(help="FedAvg rounds (baselines train rounds x epochs epochs).")] = 2,
    epochs: Annotated[int, Opt(help="Local epochs per round.")] = 1,
    eval_limit: Annotated[int, Opt(help="Test questions per client (0 = all).")] = 20,
    eval_rounds: Annotated[str, Opt(help="Extra rounds to evaluate, comma-separated (the last always is).")] = "",
    split: Annotated[str, Opt(help="test | dev")] = "test",
    top_k: Annotated[int, Opt("--k", "-k", help="Passages retrieved per question.")] = 3,
    passage_tokens: Annotated[int, Opt(help="Reader tokens kept per passage.")] = 48,
    answer_tokens: Annotated[int, Opt(help="Max answer tokens (training target and generation).")] = 10,
    batch_size: Annotated[int, Opt(help="Examples per optimiser step.")] = 2,
    lr_retriever: Annotated[float, Opt()] = 5e-5,
    lr_reader: Annotated[float, Opt(help="LoRA learning rate.")] = 2e-3,
    lora_layers: Annotated[int, Opt(help="LoRA on the last N reader layers.")] = 8,
    parallel: Annotated[int, Opt(help="Clients run at once by Flower (each holds a model copy).")] = 1,
    threads: Annotated[Optional[int], Opt(help="torch threads per client (default: TANDEM_LLM_THREADS / torch).")] = None,
    inprocess: Annotated[bool, Opt(help="Collaborative mode without Flower (Algorithm 1 in one process).")] = False,
    seed: Annotated[int, Opt()] = 0,
) -> None:
    """Run CoRAG on Flower's simulation runtime (ServerApp + ClientApp, FedAvg), or a baseline."""
    from tandem.federated.corag import MODES

    if mode not in MODES:
        raise typer.BadParameter(f"unknown mode {mode!r}; modes: {sorted(MODES)}")
    spec = _spec(bench, variant, shots, clients, rounds, epochs, eval_limit, top_k, passage_tokens, answer_tokens,
                 batch_size, lr_retriever, lr_reader, lora_layers, threads, eval_rounds, split, run_dir, seed)
    _run(mode, spec, run_dir, parallel, inprocess)


@federate_app.command("compare")
def compare(runs: Annotated[list[Path], typer.Argument(help="Run folders to put side by side.")]) -> None:
    """One table of EM / F1 / hit@k, wall time and peak RSS across finished run folders, with the
    per-question paired difference in EM to the first run and its 95% bootstrap interval."""
    from tandem.federated.corag import question_scores

    table = Table(title="CoRAG runs")
    for col in ("run", "mode", "variant", "shots", "EM", "F1", "hit@k", "minutes", "peak RSS GiB", "dEM vs first [95% CI]"):
        table.add_column(col)
    first = {k: v[0] for k, v in question_scores(runs[0]).items()} if runs else {}
    for run in runs:
        path = run / "metrics.json"
        if not path.is_file():
            raise typer.BadParameter(f"{run} has no metrics.json (unfinished or not a run folder)")
        m = json.loads(path.read_text(encoding="utf-8"))
        table.add_row(str(run), m["mode"], m["variant"], str(m["shots"]), str(m.get("em_macro")), str(m.get("f1_macro")),
                      str(m.get("hit@k_macro", "")), f"{m['wall_seconds'] / 60:.1f}", str(m["peak_rss_gib"]), _delta(first, run))
    out.print(table)


def _delta(first: dict[str, float], run: Path) -> str:
    from tandem.federated.corag import paired_bootstrap, question_scores

    diff, lo, hi = paired_bootstrap({k: v[0] for k, v in question_scores(run).items()}, first)
    return f"{diff:+.1f} [{lo:+.1f}, {hi:+.1f}]"
