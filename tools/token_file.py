"""An independent reader and writer of braid's token files (versions 1, 2 and
3, see src/braid/data/token_file.h), checking every checksum with zlib.crc32.
Version 3 holds uint32 ids, for vocabularies over 65,536; the writer uses it
only then."""
import struct
import zlib

MAGIC = b"BRAIDTOK"
BLOCK = 1 << 19  # tokens per checksummed block


def read(path):
    """Returns (vocab_size, version, ids as a list); raises ValueError when the file is damaged."""
    raw = open(path, "rb").read()
    magic, version, vocab, n = struct.unpack_from("<8sIIQ", raw, 0)
    if magic != MAGIC or version not in (1, 2, 3):
        raise ValueError(f"{path}: not a braid token file (magic {magic!r}, version {version})")
    width, code = (4, "I") if version == 3 else (2, "H")
    head, crcs = 24, []
    if version >= 2:
        block, hcrc = struct.unpack_from("<II", raw, 24)
        if zlib.crc32(raw[:28]) != hcrc:
            raise ValueError(f"{path}: header checksum")
        nblocks = (n + block - 1) // block
        crcs = struct.unpack_from(f"<{nblocks}I", raw, 32)
        head = 32 + 4 * nblocks
    if len(raw) != head + width * n:
        raise ValueError(f"{path}: {len(raw)} bytes, header says {head + width * n}")
    body = raw[head:]
    for b, c in enumerate(crcs):
        if zlib.crc32(body[width * b * BLOCK: width * (b + 1) * BLOCK]) != c:
            raise ValueError(f"{path}: checksum of block {b}")
    ids = list(struct.unpack_from(f"<{n}{code}", body, 0))
    if any(t >= vocab for t in ids):
        raise ValueError(f"{path}: an id >= vocab_size {vocab}")
    return vocab, version, ids


def write(path, ids, vocab):
    """Writes version 2, or 3 when vocab exceeds 65,536 (through a temporary file and a rename)."""
    import os
    version, width, code = (3, 4, "I") if vocab > 65536 else (2, 2, "H")
    body = struct.pack(f"<{len(ids)}{code}", *ids)
    head = struct.pack("<8sIIQI", MAGIC, version, vocab, len(ids), BLOCK)
    head += struct.pack("<I", zlib.crc32(head))
    for a in range(0, len(body), width * BLOCK):
        head += struct.pack("<I", zlib.crc32(body[a:a + width * BLOCK]))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head + body)
    os.replace(tmp, path)
