"""Tar streams for uploading and downloading directory trees.

The guest's GET /files/archive?path=P names a directory's entries relative
to P; PUT /files/archive?path=P extracts a tar under P. Uploads are built
in a spooled temporary file (memory up to 16 MiB, then disk) and sent in
chunks; downloads are extracted entry by entry, refusing any entry that
would land outside the destination."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from typing import IO, Iterator

from .errors import InvalidArgumentError

CHUNK = 256 << 10
SPOOL = 16 << 20


def tar_dir(local_dir: str) -> IO[bytes]:
    """Return a temporary file holding a tar of local_dir's content
    (entries relative to it), positioned at its start."""
    f = tempfile.SpooledTemporaryFile(max_size=SPOOL)
    with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name in sorted(os.listdir(local_dir)):
            tf.add(os.path.join(local_dir, name), arcname=name, recursive=True)
    f.seek(0)
    return f  # type: ignore[return-value]


def chunks(f: IO[bytes], size: int = CHUNK) -> Iterator[bytes]:
    """Read f to its end in chunks (for a streamed request body)."""
    while True:
        b = f.read(size)
        if not b:
            return
        yield b


def _inside(root: str, rel: str) -> str:
    dest = os.path.realpath(os.path.join(root, rel))
    if dest != root and not dest.startswith(root + os.sep):
        raise InvalidArgumentError(f"archive entry {rel!r} would land outside {root}; refusing it")
    return dest


def extract(f: IO[bytes], local_dir: str) -> None:
    """Extract the tar in f under local_dir (created if missing). Files,
    directories, symlinks and hard links (to names inside the tree) are
    made; other kinds are skipped. No entry is written through a symlink
    to outside local_dir."""
    os.makedirs(local_dir, exist_ok=True)
    root = os.path.realpath(local_dir)
    with tarfile.open(fileobj=f, mode="r|") as tf:
        for m in tf:
            name = m.name.lstrip("/")
            if not name or name in (".", "./"):
                continue
            if os.path.isabs(m.name) or ".." in name.split("/"):
                raise InvalidArgumentError(f"archive entry {m.name!r} is not a relative path inside the tree")
            base = os.path.basename(name.rstrip("/"))
            parent = _inside(root, os.path.dirname(name.rstrip("/")))
            os.makedirs(parent, exist_ok=True)
            # The last component is never followed: a link there is replaced.
            dest = os.path.join(parent, base)
            if m.isdir():
                if os.path.islink(dest):
                    os.unlink(dest)
                os.makedirs(dest, exist_ok=True)
                os.chmod(dest, (m.mode & 0o777) | 0o700)
            elif m.isreg():
                src = tf.extractfile(m)
                assert src is not None
                if os.path.lexists(dest) and not os.path.isdir(dest):
                    os.unlink(dest)
                with open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, CHUNK)
                os.chmod(dest, m.mode & 0o777)
            elif m.issym():
                # Any target is kept as is: later entries are placed by
                # their resolved parent, which must stay inside the tree.
                if os.path.lexists(dest) and not os.path.isdir(dest):
                    os.unlink(dest)
                os.symlink(m.linkname, dest)
            elif m.islnk():
                target = _inside(root, m.linkname.lstrip("/"))
                if os.path.lexists(dest) and not os.path.isdir(dest):
                    os.unlink(dest)
                os.link(target, dest)
