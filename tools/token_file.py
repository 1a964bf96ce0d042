"""An independent reader and writer of braid's token files (versions 1 and 2,
see src/braid/data/token_file.h), checking every checksum with zlib.crc32."""
import struct
import zlib

MAGIC = b"BRAIDTOK"
BLOCK = 1 << 19  # tokens per checksummed block


def read(path):
    """Returns (vocab_size, version, ids as a list); raises ValueError when the file is damaged."""
    raw = open(path, "rb").read()
    magic, version, vocab, n = struct.unpack_from("<8sIIQ", raw, 0)
    if magic != MAGIC or version not in (1, 2):
        raise ValueError(f"{path}: not a braid token file (magic {magic!r}, version {version})")
    head, crcs = 24, []
    if version == 2:
        block, hcrc = struct.unpack_from("<II", raw, 24)
        if zlib.crc32(raw[:28]) != hcrc:
            raise ValueError(f"{path}: header checksum")
        nblocks = (n + block - 1) // block
        crcs = struct.unpack_from(f"<{nblocks}I", raw, 32)
        head = 32 + 4 * nblocks
    if len(raw) != head + 2 * n:
        raise ValueError(f"{path}: {len(raw)} bytes, header says {head + 2 * n}")
    body = raw[head:]
    for b, c in enumerate(crcs):
        if zlib.crc32(body[2 * b * BLOCK: 2 * (b + 1) * BLOCK]) != c:
            raise ValueError(f"{path}: checksum of block {b}")
    ids = list(struct.unpack_from(f"<{n}H", body, 0))
    if any(t >= vocab for t in ids):
        raise ValueError(f"{path}: an id >= vocab_size {vocab}")
    return vocab, version, ids


def write(path, ids, vocab):
    """Writes version 2 (through a temporary file and a rename)."""
    import os
    body = struct.pack(f"<{len(ids)}H", *ids)
    head = struct.pack("<8sIIQI", MAGIC, 2, vocab, len(ids), BLOCK)
    head += struct.pack("<I", zlib.crc32(head))
    for a in range(0, len(body), 2 * BLOCK):
        head += struct.pack("<I", zlib.crc32(body[a:a + 2 * BLOCK]))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head + body)
    os.replace(tmp, path)
