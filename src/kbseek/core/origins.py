"""Where a stored document came from, as its ``origin`` text says: a file path, ``name#path`` for documents made in
memory, or ``git:<repository>@<commit>:<path>`` for a document read from a Git commit (``kbseek sync git``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# non-greedy up to the first "@<full hash>:", so that a repository named "git@host:team/kb" parses whole
_GIT = re.compile(r"^git:(?P<repo>.+?)@(?P<commit>[0-9a-f]{40}(?:[0-9a-f]{24})?):(?P<path>.*)$")


@dataclass(frozen=True, slots=True)
class GitOrigin:
    """A document read from ``path`` (within the repository) at ``commit`` of ``repo`` (credentials masked)."""

    repo: str
    commit: str
    path: str

    def __str__(self) -> str:
        return f"git:{self.repo}@{self.commit}:{self.path}"


def git_origin(origin: str | None) -> GitOrigin | None:
    """The Git origin ``origin`` names, or ``None`` for any other origin.

    >>> o = git_origin("git:git@host:team/kb@" + "a" * 40 + ":ops/disk.md")
    >>> (o.repo, o.commit[:4], o.path)
    ('git@host:team/kb', 'aaaa', 'ops/disk.md')
    >>> git_origin("/srv/kb/ops/disk.md") is None, git_origin(None) is None
    (True, True)
    """
    match = _GIT.match(origin or "")
    return GitOrigin(match["repo"], match["commit"], match["path"]) if match else None
