"""A local folder (read recursively) or a single file of transcripts."""

from __future__ import annotations

from pathlib import Path

from memory_pipelines.formats import ACCEPTED_KINDS, is_transcript_name
from memory_pipelines.sources.base import (
    Listing, NotATranscriptFile, ObjectBytes, SourceObject, TranscriptSourceError, UnreadableObject,
)


class LocalStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)
        # names are relative to the folder (a single file: to its folder), as source_file says
        self._base = path.parent if path.is_file() else path

    def list_objects(self) -> Listing:
        if self.path.is_file():
            if not is_transcript_name(self.path.name):
                raise NotATranscriptFile(f"{self.path} is not a transcript file: accepted are {ACCEPTED_KINDS}")
            files = [self.path]
        elif self.path.is_dir():
            files = sorted(p for p in self.path.rglob("*") if p.is_file())
        else:
            raise TranscriptSourceError(f"transcript path does not exist: {self.path}")
        objects, skipped = [], []
        for f in files:
            name = f.relative_to(self._base).as_posix()
            if not is_transcript_name(name):
                skipped.append(name)
                continue
            stat = f.stat()
            objects.append(SourceObject(name, stat.st_size, stat.st_mtime_ns))
        return Listing(tuple(objects), tuple(skipped))

    def read(self, obj: SourceObject) -> ObjectBytes:
        try:
            return ObjectBytes((self._base / obj.name).read_bytes())
        except OSError as exc:
            raise UnreadableObject(f"cannot read {self._base / obj.name}: {exc.strerror or exc}") from None
