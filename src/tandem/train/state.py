"""A trainer's resumable state, ``trainer.pt`` (optimizer, scheduler, step, RNG, log), read back safely: shared by
the trainers that resume (R²AG's and DualRAG-FT's)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from tandem.errors import ConfigError, DamagedError
from tandem.outdir import check_files

TRAINER_FILE = "trainer.pt"


def load_trainer_state(folder: str | Path, *, fix: str | None = None, refused: str = "delete it") -> dict[str, Any] | None:
    """The state saved as ``folder/trainer.pt`` (None when there is none). Loaded with ``weights_only=True``:
    tensors and plain containers only, so a crafted file cannot run code. ``fix``: what the error for a damaged
    file tells the user to do (default: delete the folder to start over); ``refused``: the same for a file that is
    not a plain state."""
    path = Path(folder) / TRAINER_FILE
    if not path.is_file():
        return None
    fix = fix or f"delete {Path(folder)} to start over"
    check_files(folder, lambda _file: fix)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ConfigError(f"{path}: refusing to load (not a plain trainer state: "
                          f"{str(exc).splitlines()[0][:200]}); {refused}") from exc
    except (RuntimeError, EOFError, OSError) as exc:
        raise DamagedError(f"cannot read {path} ({str(exc).splitlines()[0][:200]}): the file is damaged; {fix}") from exc


__all__ = ["TRAINER_FILE", "load_trainer_state"]
