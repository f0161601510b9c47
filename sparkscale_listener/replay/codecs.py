"""Finding an application's event log files and undoing Spark's compression, chunk by chunk.

A log is one file (``<appId>[.<codec>][.inprogress]``) or a rolling folder
(``eventlog_v2_<appId>/events_<n>_<appId>[.<codec>][.compact]``, read in index order, with an
``appstatus_<appId>[.inprogress]`` file). The codec is the name's extension, as Spark reads it.

Spark's streams are not the standard frame formats of their libraries (``CompressionCodec.scala``
writes them through its own ``compressedContinuousOutputStream``):

- ``zstd``: zstd-jni's stream, which closes a frame at every flush: standard zstd frames, one after
  another (the ``zstandard`` package, frame by frame so that a cut last frame is noticed).
- ``lz4``: lz4-java's ``LZ4BlockOutputStream``: blocks of ``"LZ4Block"``, a token (method | level),
  compressed and original lengths and an xxhash32 checksum (little-endian ints), then the block,
  raw or LZ4-compressed (``cramjam``); an empty block ends a stream, another may follow.
- ``snappy``: snappy-java's ``SnappyOutputStream``: a 16-byte header (``\\x82SNAPPY\\0``, version,
  compatible version), then big-endian length-prefixed raw snappy blocks (``cramjam``).
- ``lzf``: ning compress-lzf's chunks: ``ZV``, a type (0 plain, 1 compressed) and big-endian
  lengths; LZF is a dozen lines to decode (below), and no well-kept Python package does it.

The checksums are not verified (cramjam has no xxhash); a corrupt block fails to decompress or
comes out at the wrong length. The codec libraries are the ``replay`` extra: a plain log needs none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .records import EventLogError

CODECS = ("zstd", "lz4", "lzf", "snappy")
CHUNK_BYTES = 1 << 20
_ROLLING_FILE = re.compile(r"^events_(\d+)_")
_EXTRA_HINT = "pip install 'sparkscale-listener[replay]'"
_LIBRARY = {"zstd": "zstandard", "lz4": "cramjam", "snappy": "cramjam"}
# What a file's first bytes say about it when they are not JSON.
_UNNAMED = "-compressed, but its name does not end in .{} (the extension Spark gives that codec)"
_MAGIC = ((b"\x1f\x8b", "gzip-compressed, which Spark does not write (decompress it first)"),
          (b"\x28\xb5\x2f\xfd", "zstd" + _UNNAMED.format("zstd")),
          (b"LZ4Block", "lz4" + _UNNAMED.format("lz4")),
          (b"\x82SNAPPY\x00", "snappy" + _UNNAMED.format("snappy")),
          (b"ZV", "lzf" + _UNNAMED.format("lzf")),
          (b"PK\x03\x04", "a zip archive, not an event log (unzip it first)"))


@dataclass(frozen=True)
class LogFile:
    path: Path
    codec: str | None
    index: int  # rolling logs: the file's index; single files: 0
    compacted: bool  # a History Server compaction of the files before it


@dataclass(frozen=True)
class LogFiles:
    files: tuple[LogFile, ...]
    in_progress: bool  # Spark had not finished writing the log (.inprogress)

    @property
    def total_bytes(self) -> int:
        return sum(f.path.stat().st_size for f in self.files)


class Truncated(Exception):
    """The compressed stream ends inside a block or frame (still being written, or cut)."""

    def __init__(self, offset: int, what: str) -> None:
        super().__init__(what)
        self.offset, self.what = offset, what


def codec_of(name: str) -> str | None:
    """The codec a log file's name gives (``app-1.zstd.inprogress`` -> ``zstd``), as Spark reads it."""
    base = name.removesuffix(".compact").removesuffix(".inprogress")
    extension = base.rsplit(".", 1)[1] if "." in base else None
    return extension if extension in CODECS else None


def find_log_files(path: Path) -> LogFiles:
    if not path.exists():
        raise EventLogError(str(path), "no such file or folder")
    if path.is_file():
        return LogFiles((LogFile(path, codec_of(path.name), 0, path.name.endswith(".compact")),),
                        path.name.endswith(".inprogress"))
    files = []
    for child in path.iterdir():
        match = _ROLLING_FILE.match(child.name)
        if match and child.is_file():
            files.append(LogFile(child, codec_of(child.name), int(match.group(1)),
                                 child.name.endswith(".compact")))
    if not files:
        raise EventLogError(str(path), "is a folder without event log files (events_<n>_<appId>...): pass "
                            "one application's log, a file or its eventlog_v2_<appId> folder")
    files.sort(key=lambda f: f.index)
    in_progress = any(c.name.startswith("appstatus_") and c.name.endswith(".inprogress")
                      for c in path.iterdir())
    return LogFiles(tuple(files), in_progress)


def sniff_foreign(head: bytes) -> str | None:
    """What a file that does not start like JSON is, when its first bytes tell."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    return None


def _library(name: str, codec: str, path: Path) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise EventLogError(str(path), f"is compressed with {codec}; reading it needs the {name!r} package: "
                            f"{_EXTRA_HINT}") from None


def decompressed_chunks(log: LogFile, read: Callable[[int], None]) -> Iterator[bytes]:
    """The file's content, decompressed, in chunks; ``read(n)`` is told of each n bytes read from
    disk. Raises :class:`Truncated` after the last whole block when the stream is cut, and
    :class:`EventLogError` (with the byte offset) on corrupt data."""
    if log.codec is not None and log.codec in _LIBRARY:
        _library(_LIBRARY[log.codec], log.codec, log.path)  # a clear error before any reading
    with log.path.open("rb") as f:
        raw = _raw_chunks(f, read)
        if log.codec is None:
            yield from raw
        elif log.codec == "zstd":
            yield from _zstd(raw, log.path)
        else:
            block_reader = {"lz4": _lz4_blocks, "snappy": _snappy_blocks, "lzf": _lzf_blocks}[log.codec]
            yield from block_reader(_Buffered(raw), log.path)


def _raw_chunks(f: BinaryIO, read: Callable[[int], None]) -> Iterator[bytes]:
    while chunk := f.read(CHUNK_BYTES):
        read(len(chunk))
        yield chunk


def _zstd(raw: Iterator[bytes], path: Path) -> Iterator[bytes]:
    import zstandard

    decompressor = zstandard.ZstdDecompressor()
    frame = decompressor.decompressobj()
    frame_start = consumed = 0  # offsets in the compressed file
    in_frame = False
    for chunk in raw:
        data, base = chunk, consumed
        consumed += len(chunk)
        while data:
            in_frame = True
            try:
                out = frame.decompress(data)
            except zstandard.ZstdError as e:
                raise EventLogError(str(path), f"corrupt zstd data in the frame starting here: {e}",
                                    offset=frame_start) from None
            if out:
                yield out
            if not frame.eof:
                break
            # A frame ended: the rest of this chunk starts the next one.
            data = frame.unused_data
            frame_start = base + len(chunk) - len(data)
            frame, in_frame = decompressor.decompressobj(), False
    if in_frame:
        raise Truncated(frame_start, "the zstd stream ends inside a frame")


class _Buffered:
    """Exact reads over a stream of chunks, with the offset read so far."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._buffer, self._pos, self.offset = chunks, b"", 0, 0

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; fewer only at the end of the stream."""
        while len(self._buffer) - self._pos < n:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer = self._buffer[self._pos:] + chunk
            self._pos = 0
        out = self._buffer[self._pos:self._pos + n]
        self._pos += len(out)
        self.offset += len(out)
        return out

    def peek(self, n: int) -> bytes:
        out = self.read(n)
        self._pos -= len(out)
        self.offset -= len(out)
        return out


def _exact(stream: _Buffered, n: int, start: int, what: str) -> bytes:
    data = stream.read(n)
    if len(data) < n:
        raise Truncated(start, f"the {what} stream ends inside a block")
    return data


def _lz4_blocks(stream: _Buffered, path: Path) -> Iterator[bytes]:
    import cramjam

    while stream.peek(1):
        start = stream.offset
        header = _exact(stream, 21, start, "lz4")
        if header[:8] != b"LZ4Block":
            raise EventLogError(str(path), f"not an lz4 block (LZ4BlockOutputStream): starts {header[:8]!r}",
                                offset=start)
        method = header[8] & 0xF0
        compressed = int.from_bytes(header[9:13], "little")
        original = int.from_bytes(header[13:17], "little")
        data = _exact(stream, compressed, start, "lz4")
        if method == 0x10:
            out = data
        elif method == 0x20:
            try:
                out = bytes(cramjam.lz4.decompress_block(data, output_len=original))
            except cramjam.DecompressionError as e:
                raise EventLogError(str(path), f"corrupt lz4 block: {e}", offset=start) from None
        else:
            raise EventLogError(str(path), f"unknown lz4 block method {method:#x}", offset=start)
        if len(out) != original:
            raise EventLogError(str(path), f"corrupt lz4 block: {len(out)} bytes, its header says {original}",
                                offset=start)
        if out:
            yield out


_SNAPPY_MAGIC = b"\x82SNAPPY\x00"


def _snappy_blocks(stream: _Buffered, path: Path) -> Iterator[bytes]:
    import cramjam

    while stream.peek(1):
        start = stream.offset
        if stream.peek(8) == _SNAPPY_MAGIC:  # a stream's header (streams may be concatenated)
            _exact(stream, 16, start, "snappy")
            continue
        if start == 0:
            raise EventLogError(str(path), "not a snappy-java stream (no \\x82SNAPPY header)", offset=0)
        length = int.from_bytes(_exact(stream, 4, start, "snappy"), "big")
        data = _exact(stream, length, start, "snappy")
        try:
            out = bytes(cramjam.snappy.decompress_raw(data))
        except cramjam.DecompressionError as e:
            raise EventLogError(str(path), f"corrupt snappy block: {e}", offset=start) from None
        if out:
            yield out


def _lzf_blocks(stream: _Buffered, path: Path) -> Iterator[bytes]:
    while stream.peek(1):
        start = stream.offset
        header = _exact(stream, 5, start, "lzf")
        if header[:2] != b"ZV" or header[2] not in (0, 1):
            raise EventLogError(str(path), f"not an lzf chunk (ZV header): starts {header[:3]!r}",
                                offset=start)
        length = int.from_bytes(header[3:5], "big")
        if header[2] == 0:
            yield _exact(stream, length, start, "lzf")
            continue
        original = int.from_bytes(_exact(stream, 2, start, "lzf"), "big")
        data = _exact(stream, length, start, "lzf")
        try:
            yield lzf_decompress(data, original)
        except ValueError as e:
            raise EventLogError(str(path), f"corrupt lzf chunk: {e}", offset=start) from None


def lzf_decompress(data: bytes, original: int) -> bytes:
    """One LZF block: literal runs (control < 32: that many plus one bytes follow) and back
    references (length in the control's top 3 bits, 7 meaning "plus the next byte", plus 2;
    distance from the low 5 bits and the next byte, plus 1)."""
    out = bytearray()
    i, n = 0, len(data)
    try:
        while i < n:
            control = data[i]
            i += 1
            if control < 32:
                out += data[i:i + control + 1]
                i += control + 1
                continue
            length = control >> 5
            if length == 7:
                length += data[i]
                i += 1
            distance = ((control & 0x1F) << 8) + data[i] + 1
            i += 1
            length += 2
            ref = len(out) - distance
            if ref < 0:
                raise ValueError("a back reference before the block's start")
            if distance >= length:
                out += out[ref:ref + length]
            else:  # the copy overlaps what it writes: a repeating pattern
                pattern = out[ref:]
                out += (pattern * (length // distance + 1))[:length]
    except IndexError:
        raise ValueError("the block ends inside an instruction") from None
    if len(out) != original:
        raise ValueError(f"{len(out)} bytes, its header says {original}")
    return bytes(out)
