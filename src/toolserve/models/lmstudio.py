"""LM Studio's models folder, read in place: `lmstudio:owner/repo[/FILE.gguf]` names the GGUF
files LM Studio keeps as MODELS/owner/repo/*.gguf (a projector beside a vision model).

Where the folder is: TOOLSERVE_LMSTUDIO_MODELS if set; else LM Studio's own setting
(`downloadsFolder` in settings.json of its home, which ~/.lmstudio-home-pointer may move), else
HOME/models; the folder of LM Studio before 0.3 (~/.cache/lm-studio/models) when only it exists.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from toolserve.errors import ModelLoadError
from toolserve.models.choose import Choice, choose, choose_file, models_in
from toolserve.models.refs import LmStudioModel


def home() -> Path:
    pointer = Path.home() / ".lmstudio-home-pointer"
    try:
        text = pointer.read_text("utf-8").strip()
    except OSError:
        text = ""
    return Path(text).expanduser() if text else Path.home() / ".lmstudio"


def folder() -> Path:
    explicit = os.environ.get("TOOLSERVE_LMSTUDIO_MODELS")
    if explicit:
        return Path(explicit).expanduser()
    root = home()
    try:
        settings = json.loads((root / "settings.json").read_text("utf-8"))
    except (OSError, ValueError):
        settings = {}
    chosen = settings.get("downloadsFolder") if isinstance(settings, dict) else None
    if isinstance(chosen, str) and chosen.strip():
        return Path(chosen).expanduser()
    legacy = Path.home() / ".cache" / "lm-studio" / "models"
    return legacy if not (root / "models").is_dir() and legacy.is_dir() else root / "models"


def _ggufs(repo_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(repo_dir)) for p in repo_dir.rglob("*") if p.is_file() and p.name.lower().endswith(".gguf"))


def resolve(ref: LmStudioModel) -> tuple[Path, Choice]:
    """The repo's folder and the files of `ref` in it, or a one-line error."""
    root = folder()
    repo_dir = root / ref.repo
    if not repo_dir.is_dir():
        held = [r.repo for r in repos(root)]
        holds = f"it holds {', '.join(held[:10])}" if held else "it holds no models"
        raise ModelLoadError(
            f"lmstudio:{ref.repo} is not in LM Studio's models folder {root} ({holds}); download it in LM Studio "
            "(TOOLSERVE_LMSTUDIO_MODELS names another folder)"
        )
    names = _ggufs(repo_dir)
    where = f"lmstudio:{ref.repo}"
    return repo_dir, choose_file(names, ref.file, where) if ref.file is not None else choose(names, ref.quant, where)


def repos(root: Path | None = None) -> Iterator[LmStudioModel]:
    """Every owner/repo folder holding a model GGUF."""
    root = root or folder()
    if not root.is_dir():
        return
    for repo_dir in sorted(p for p in root.glob("*/*") if p.is_dir()):
        if models_in(_ggufs(repo_dir)):
            yield LmStudioModel(str(repo_dir.relative_to(root)))


def files(ref: LmStudioModel, root: Path | None = None) -> list[str]:
    """The model GGUFs of a repo folder (first parts of split models; projectors left out)."""
    return models_in(_ggufs((root or folder()) / ref.repo))



def projector_of(ref: LmStudioModel, file: str, root: Path | None = None) -> str | None:
    """The projector that would be loaded beside `file` of the repo folder."""
    return choose_file(_ggufs((root or folder()) / ref.repo), file, ref.repo).mmproj
