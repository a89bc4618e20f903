"""A served data home kept in step with its sources while it runs: the folders it watches (``watch_dirs``,
``kbseek serve --watch``; ``kbseek.home.watch``) and the Git repositories it syncs (``git_sources``;
``kbseek.home.gitsources``). ``kbseek watch`` uses the same watchers alone."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kbseek.home.gitsources import GitSources
from kbseek.home.watch import FolderWatcher, Watching, WatchReport
from kbseek.settings import Settings

if TYPE_CHECKING:
    from kbseek.service import KnowledgeBase

log = logging.getLogger("kbseek")

__all__ = ["GitSources", "Live", "WatchReport", "Watching", "git_sources", "watch_folders"]


def watch_folders(
    kb: KnowledgeBase,
    folders: list[Path],
    *,
    prune: bool = True,
    on_report: Callable[[WatchReport], None] | None = None,
) -> Watching:
    """Watchers of ``folders`` writing ``kb`` (not started); ``NotFoundError`` for a folder that is not one."""
    settings = kb.settings
    watchers = [
        FolderWatcher(kb.writer, kb.indexes.refresh, folder, settle_s=settings.watch_settle_s, prune=prune)
        for folder in folders
    ]
    return Watching(watchers, interval_s=settings.watch_interval_s, on_report=on_report)


def git_sources(kb: KnowledgeBase) -> GitSources:
    """The configured Git sources of ``kb``'s settings, synced through it (not started)."""
    return GitSources(
        list(kb.settings.git_sources),
        lambda source: kb.sync_git(source.repo, ref=source.ref, path=source.path, prune=source.prune),
    )


class Live:
    """What a server runs beside its requests: the watched folders and the Git sources' schedule."""

    def __init__(self, kb: KnowledgeBase, settings: Settings) -> None:
        self.sources = git_sources(kb)
        folders = []
        for folder in settings.watch_dirs:  # checked by 'kbseek serve --watch'; a setting may name one gone since
            if folder.is_dir():
                folders.append(folder)
            else:
                log.error("watch_dirs: %s is not a folder; it is not watched", folder)
        self.watching = watch_folders(kb, folders, on_report=_log_report)

    def start(self) -> Live:
        if self.watching.watchers:
            self.watching.start()
        self.sources.start()
        return self

    def stop(self) -> None:
        self.watching.stop()
        self.sources.stop()


def _log_report(report: WatchReport) -> None:
    for file in report.files:
        if file.status == "failed":
            log.warning("watch: %s failed: %s", file.source, file.reason)
        for warning in file.warnings:
            log.warning("watch: %s", warning)
