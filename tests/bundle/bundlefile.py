"""The bundle container of docs/bundle.md, written a second time in Python: the tests read bundles
with it (to find where each section lies) and write altered ones (another version, another
manifest) whose checksums are right, so that each refusal is reached for its own reason. Being a
separate implementation of the same page, it also checks the page against the C++ reader.

Imports nothing but the standard library.
"""
import json
import struct
import zlib

MAGIC = b"\x89TSRBND\n"
END_MAGIC = b"TSRBEND\n"
HEADER = 64
ENTRY = 48
TRAILER = 16
ALIGN = 64

KINDS = {1: "manifest", 2: "module", 3: "graph-ir", 4: "schedule", 5: "tile-ir", 6: "cpu-object", 7: "ptx", 8: "cubin", 9: "model", 10: "tensors"}


def crc(b):
    return zlib.crc32(b) & 0xFFFFFFFF


def align(x):
    return (x + ALIGN - 1) // ALIGN * ALIGN


class Section:
    def __init__(self, kind, tag, data, offset=0):
        self.kind, self.tag, self.data, self.offset = kind, tag, data, offset

    @property
    def end(self):
        return self.offset + len(self.data)


class Bundle:
    """A parsed bundle: version, sections (section 0 is the manifest), and the manifest as JSON."""

    def __init__(self, major, minor, sections):
        self.major, self.minor, self.sections = major, minor, sections

    @property
    def manifest(self):
        return json.loads(self.sections[0].data.decode())

    def with_manifest(self, m):
        self.sections[0].data = json.dumps(m, indent=1).encode()
        return self


def read(data):
    """Parses a well-formed bundle (no validation beyond what finding the sections needs)."""
    assert data[:8] == MAGIC, "not a bundle"
    major, minor = struct.unpack_from("<HH", data, 8)
    count = struct.unpack_from("<I", data, 20)[0]
    table = struct.unpack_from("<Q", data, 24)[0]
    sections = []
    for i in range(count):
        kind, _, off, size = struct.unpack_from("<IIQQ", data, table + i * ENTRY)
        tag = data[table + i * ENTRY + 32:table + i * ENTRY + 48].split(b"\0")[0].decode()
        sections.append(Section(kind, tag, data[off:off + size], off))
    return Bundle(major, minor, sections)


def write(b):
    """The bytes of `b`, laid out and checksummed as docs/bundle.md says."""
    n = len(b.sections)
    at = align(HEADER + n * ENTRY)
    offsets = []
    for s in b.sections:
        offsets.append(at)
        at = align(at + len(s.data))
    size = at + TRAILER
    out = bytearray(size)
    out[0:8] = MAGIC
    struct.pack_into("<HH", out, 8, b.major, b.minor)
    struct.pack_into("<I", out, 12, crc(bytes(out[0:12])))
    struct.pack_into("<IIQQI", out, 16, HEADER, n, HEADER, size, 0)
    for i, (s, off) in enumerate(zip(b.sections, offsets)):
        e = HEADER + i * ENTRY
        struct.pack_into("<IIQQII", out, e, s.kind, 0, off, len(s.data), crc(s.data), 0)
        out[e + 32:e + 32 + len(s.tag)] = s.tag.encode()
        out[off:off + len(s.data)] = s.data
        s.offset = off
    struct.pack_into("<I", out, 44, crc(bytes(out[HEADER:HEADER + n * ENTRY])))
    struct.pack_into("<I", out, 60, crc(bytes(out[0:60])))
    out[at:at + 8] = END_MAGIC
    struct.pack_into("<II", out, at + 8, crc(bytes(out[0:at])), 0)
    return bytes(out)
