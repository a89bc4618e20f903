"""Originals on disk under ``knowledge_base/<document path>``, written atomically."""

from __future__ import annotations

import errno
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kbseek.core.paths import safe_document_path
from kbseek.errors import StorageError, StorageFullError, UnsafePathError

TEMP_SUFFIX = ".kbseek-tmp"
FOLDER_ATTEMPTS = 5
log = logging.getLogger("kbseek")


class FileStore:
    """A folder of Markdown originals; every write is temp file + fsync + rename.

    Callers hold the path while they write or delete it (``KnowledgeBase.writes``); folders are made and
    pruned here, safely beside writes of other paths in the same folder.

    >>> import tempfile
    >>> store = FileStore(Path(tempfile.mkdtemp()), fsync=False)
    >>> store.write("ops/a.md", "# 超时".encode())
    >>> store.read("ops/a.md").decode()
    '# 超时'
    >>> store.delete("ops/a.md"), list(store.paths())
    (True, [])
    """

    def __init__(self, root: Path, *, fsync: bool = True) -> None:
        self.root = root
        self.fsync = fsync

    def _resolve(self, path: str) -> Path:
        target = self.root / safe_document_path(path)
        root = self.root.resolve()
        if not target.resolve().is_relative_to(root):  # a symlinked folder must not lead out
            raise UnsafePathError(f"document path {path!r} leads outside the knowledge base")
        return target

    def write(self, path: str, data: bytes) -> None:
        """Write ``path`` whole or not at all; a failure says which document, never which server folder."""
        target = self._resolve(path)
        try:
            fd, temp = self._temp_beside(target)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    if self.fsync:
                        handle.flush()
                        os.fsync(handle.fileno())
                os.replace(temp, target)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageFullError(
                    f"could not write the original of {path}: the disk is full ({exc.strerror})",
                    hint="free space in the data home; nothing was stored",
                ) from exc
            log.warning("could not write the original of %s: %s", path, exc)
            raise StorageError(
                f"could not write the original of {path}: {exc.strerror or type(exc).__name__}",
                hint="the server log names the folder; nothing was stored",
            ) from exc

    @staticmethod
    def _temp_beside(target: Path) -> tuple[int, str]:
        """A new temp file in ``target``'s folder, made if missing. Deleting the last document of a folder
        removes the folder; when that happens between making it and creating the temp file (another path in
        the same folder), it is made again. Once the temp file is in, the folder is not empty and stays."""
        for attempt in range(FOLDER_ATTEMPTS):
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                return tempfile.mkstemp(dir=target.parent, prefix=".", suffix=TEMP_SUFFIX)
            except (FileNotFoundError, FileExistsError):
                if attempt == FOLDER_ATTEMPTS - 1 or (target.parent.exists() and not target.parent.is_dir()):
                    raise
        raise AssertionError("unreachable")

    def read(self, path: str) -> bytes | None:
        try:
            return self._resolve(path).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("could not read the original of %s: %s", path, exc)
            raise StorageError(
                f"could not read the original of {path}: {exc.strerror or type(exc).__name__}",
                hint="the server log names the folder",
            ) from exc

    def delete(self, path: str) -> bool:
        target = self._resolve(path)
        try:
            target.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("could not delete the original of %s: %s", path, exc)
            raise StorageError(
                f"could not delete the original of {path}: {exc.strerror or type(exc).__name__}",
                hint="the server log names the folder",
            ) from exc
        self._prune_empty_parents(target.parent)
        return True

    def move_out(self, path: str, destination: Path) -> Path:
        """Move a stored file to ``destination/<path>`` (never overwriting); returns the new place."""
        source = self._resolve(path)
        target = destination / path
        counter = 0
        while target.exists():
            counter += 1
            target = destination / f"{path}.{counter}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
        self._prune_empty_parents(source.parent)
        return target

    def paths(self) -> Iterator[str]:
        """Relative POSIX paths of every stored file (temp files excluded)."""
        if not self.root.is_dir():
            return
        for folder, dirs, files in os.walk(self.root):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(TEMP_SUFFIX):
                    continue
                yield Path(folder, name).relative_to(self.root).as_posix()

    def temp_files(self) -> list[Path]:
        """Half-written originals a crash left behind."""
        return list(self.root.rglob(f"*{TEMP_SUFFIX}")) if self.root.is_dir() else []

    def remove_temp_files(self) -> int:
        temps = self.temp_files()
        for temp in temps:
            temp.unlink(missing_ok=True)
        return len(temps)

    def _prune_empty_parents(self, folder: Path) -> None:
        root = self.root.resolve()
        while folder.resolve() != root and folder.resolve().is_relative_to(root):
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent
