"""Transcripts under an object-storage prefix (`s3://bucket/prefix`), over pyarrow's own S3
client: AWS S3 or any S3-compatible server (MinIO, Ceph, moto) at `endpoint_url`."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pyarrow import fs as pafs

from memory_pipelines.formats import is_transcript_name
from memory_pipelines.sources.base import Listing, ObjectBytes, SourceObject, TranscriptSourceError, UnreadableObject

# A dead endpoint must fail a run in seconds: at worst three attempts (the SDK's standard retry)
# of a 3 s connect; a refused connection fails in 1-2 s. pyarrow applies request_timeout (a
# socket read timeout) on Windows and macOS only and ignores it on Linux.
CONNECT_TIMEOUT_S = 3.0
REQUEST_TIMEOUT_S = 20.0

_AWS_ERROR = re.compile(r"AWS Error (\w+)(?: \(HTTP status (\d+)\))? during \w+ operation: (.*)")
_CREDENTIAL_ERRORS = {"ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH",
                      "MISSING_AUTHENTICATION_TOKEN", "INVALID_CLIENT_TOKEN_ID", "EXPIRED_TOKEN"}
_FIX = "check MEMORY_S3_ENDPOINT_URL and the AWS_* credentials"


def _split_location(location: str) -> tuple[str, str]:
    """(bucket, prefix without surrounding slashes) of an `s3://bucket[/prefix]` URL."""
    parts = urlsplit(location)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise TranscriptSourceError(f"not an object-storage location: {location!r} — write it as s3://bucket/prefix")
    return parts.netloc, parts.path.strip("/")


def _filesystem(endpoint_url: str | None) -> pafs.S3FileSystem:
    """Credentials and region come from the AWS_* variables (or ~/.aws), which pyarrow reads
    itself; an endpoint is for S3-compatible servers, plain http allowed."""
    # never creates a bucket: a mistyped location must fail, not make a new one
    options = {"connect_timeout": CONNECT_TIMEOUT_S, "request_timeout": REQUEST_TIMEOUT_S,
               "allow_bucket_creation": False}
    if endpoint_url is None:
        return pafs.S3FileSystem(**options)
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/"):
        raise TranscriptSourceError(f"not an S3 endpoint: {endpoint_url!r} — set MEMORY_S3_ENDPOINT_URL "
                                    "to http(s)://host[:port]")
    return pafs.S3FileSystem(scheme=parts.scheme, endpoint_override=parts.netloc, **options)


def _reason(exc: OSError) -> str:
    """pyarrow's error in a few words, with what to fix."""
    text = " ".join(str(exc).split())
    match = _AWS_ERROR.search(text)
    if match is None:
        return f"{text} — {_FIX}"
    code, status, detail = match.groups()
    # the request id helps no one reading a run's log; curl's own words are the useful part
    detail = re.sub(r"\s*\(Request ID: [^)]*\)|^No response body\.$", "", detail).split("Details: ")[-1]
    said = f": {detail}" if detail else ""
    if code == "NETWORK_CONNECTION":
        return f"cannot connect{said} — {_FIX}"
    if code in _CREDENTIAL_ERRORS or status in ("401", "403"):
        return f"access denied ({code.lower()}{said}) — check the AWS_* credentials and the bucket's policy"
    return f"{code.lower()}{f' (HTTP {status})' if status else ''}{said} — {_FIX}"


class S3Store:
    """The transcript files under `s3://bucket/prefix`: listed in one pass, read one at a
    time. Object names are relative to the prefix, as a folder's are to the folder."""

    def __init__(self, location: str, endpoint_url: str | None = None):
        self.location = location
        self.endpoint_url = endpoint_url
        self._bucket, prefix = _split_location(location)
        self._base = f"{self._bucket}/{prefix}" if prefix else self._bucket
        self._fs = _filesystem(endpoint_url)

    @property
    def _where(self) -> str:
        return self.endpoint_url or "the AWS endpoint"

    def _key(self, name: str) -> str:
        return f"{self._base}/{name}"

    def list_objects(self) -> Listing:
        # recursive: without it the listing stops at the first "/" below the prefix
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._base, recursive=True))
        except FileNotFoundError:
            # The bucket exists (a missing one is NO_SUCH_BUCKET) but no key has this prefix:
            # refused like a folder that does not exist, so a mistyped prefix is not an empty run.
            raise self._error("no object has this prefix — check the location") from None
        except OSError as exc:
            if "NO_SUCH_BUCKET" in str(exc):
                raise self._error(f"bucket {self._bucket!r} does not exist — check the location "
                                  "and MEMORY_S3_ENDPOINT_URL") from None
            raise self._error(_reason(exc)) from None
        files = sorted((i for i in infos if i.is_file), key=lambda i: i.path)
        names = [(i, i.path[len(self._base) + 1:]) for i in files]
        # Listing results carry ETags, but pyarrow's FileInfo does not expose them (pyarrow 26):
        # a HEAD request per object would. Size and modification time (whole seconds at S3) are
        # the change state; the ETag of the version read comes with its bytes (`read`).
        objects = tuple(SourceObject(name, i.size, i.mtime_ns) for i, name in names if is_transcript_name(name))
        skipped = tuple(name for _, name in names if not is_transcript_name(name))
        return Listing(objects, skipped)

    def _error(self, reason: str) -> TranscriptSourceError:
        return TranscriptSourceError(f"cannot list {self.location} at {self._where}: {reason}")

    def read(self, obj: SourceObject) -> ObjectBytes:
        try:
            with self._fs.open_input_stream(self._key(obj.name)) as stream:
                etag = stream.metadata().get("ETag")
                return ObjectBytes(stream.read(), etag.decode().strip('"') if etag else None)
        except FileNotFoundError:
            reason = "it is gone since it was listed (deleted or renamed)"
        except OSError as exc:
            reason = _reason(exc)
        raise UnreadableObject(f"cannot read {obj.name} from {self.location} at {self._where}: {reason}")

