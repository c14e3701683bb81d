#!/usr/bin/env python3
"""Tessera's tensor files against NumPy, torch and an independent safetensors reader.

usage: test_formats.py FORMATS_TOOL

Checks, through tests/runtime/formats_tool:
  - .npy and .npz files written by NumPy (every dtype Tessera reads, C order, versions 1-3, stored
    and deflated archives) load with the right dtype, shape and values, and Tessera's copies load
    back in NumPy unchanged;
  - .safetensors files written here, following the format's specification (the safetensors package
    is not used), load correctly, and Tessera's files pass this script's reader;
  - rounding into f16 agrees with NumPy's astype and into bf16 with torch's .to(torch.bfloat16)
    (skipped, with a line saying so, when torch is not importable);
  - load_csv agrees with numpy.loadtxt on plain and gzip files;
  - bad files are errors that name the file.
The last line is "N passed, M failed"; the exit status is 1 when anything failed.
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile


def ensure_numpy():
    """Re-runs this script under a python3 that has numpy (the one on PATH may be a pyenv build
    without it; Debian's /usr/bin/python3 has python3-numpy)."""
    try:
        import numpy  # noqa: F401
        return
    except ImportError:
        pass
    if not os.environ.get("TSR_FORMATS_REEXEC"):
        for cand in ["/usr/bin/python3", shutil.which("python3")]:
            if not cand or os.path.realpath(cand) == os.path.realpath(sys.executable):
                continue
            if subprocess.run([cand, "-c", "import numpy"], capture_output=True).returncode == 0:
                os.environ["TSR_FORMATS_REEXEC"] = "1"
                os.execv(cand, [cand] + sys.argv)
    print("FAIL setup: no python3 here can import numpy (install python3-numpy: tools/setup.sh)")
    print("0 passed, 1 failed")
    sys.exit(1)


ensure_numpy()
import numpy as np  # noqa: E402

try:
    import torch  # noqa: E402
except Exception:  # pragma: no cover - depends on the machine
    torch = None

TOOL = sys.argv[1] if len(sys.argv) > 1 else None
passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def tool(*args):
    return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)


def dump(path):
    r = tool("dump", path)
    if r.returncode != 0:
        raise RuntimeError(f"dump {path} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


# ---- values -------------------------------------------------------------------------------------

def from_json(v):
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[v]
    return v


def same_value(a, b):
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


def compare_values(got, expect):
    """The first mismatch between two flat lists, as text, or ''."""
    got = [from_json(v) for v in got]
    if len(got) != len(expect):
        return f"{len(got)} values, expected {len(expect)}"
    for i, (g, e) in enumerate(zip(got, expect)):
        if not same_value(g, e):
            return f"element {i}: got {g!r}, expected {e!r}"
    return ""


TESSERA_DTYPE = {
    np.dtype("float64"): "f64", np.dtype("float32"): "f32", np.dtype("float16"): "f16",
    np.dtype("int64"): "i64", np.dtype("int32"): "i32", np.dtype("int8"): "i8", np.dtype("bool"): "bool",
    # widened: Tessera has no unsigned or 16-bit integers
    np.dtype("uint8"): "i32", np.dtype("int16"): "i32", np.dtype("uint16"): "i32", np.dtype("uint32"): "i64",
}
NUMPY_OF = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "i64": np.int64, "i32": np.int32,
            "i8": np.int8, "bool": np.bool_}


def flat(a):
    a = np.asarray(a)
    if a.dtype.kind == "f":
        return [float(v) for v in a.astype(np.float64).ravel()]
    if a.dtype.kind == "b":
        return [int(v) for v in a.ravel()]
    return [int(v) for v in a.ravel()]


def check_tensor(name, got, arr, dtype=None):
    dtype = dtype or TESSERA_DTYPE[np.dtype(arr.dtype).newbyteorder("=")]
    if got["dtype"] != dtype:
        return check(name, False, f"dtype {got['dtype']}, expected {dtype}")
    if tuple(got["shape"]) != arr.shape:
        return check(name, False, f"shape {got['shape']}, expected {list(arr.shape)}")
    bad = compare_values(got["values"], flat(arr))
    check(name, not bad, bad)


def arrays_equal(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
    if a.dtype.kind == "f":
        if not np.array_equal(a, b, equal_nan=True):
            return "values differ"
        if not np.array_equal(np.signbit(a), np.signbit(b)):
            return "signs of zero differ"
        return ""
    return "" if np.array_equal(a, b) else "values differ"


def numpy_cases():
    rng = np.random.default_rng(0)
    f64 = rng.standard_normal((3, 4))
    f64[0, 0], f64[0, 1], f64[0, 2], f64[0, 3] = np.nan, np.inf, -np.inf, -0.0
    return {
        "f64": f64,
        "f32": (f64 * 100).astype(np.float32),
        "f16": (f64 * 10).astype(np.float16),
        "i64": np.array([np.iinfo(np.int64).min, -1, 0, 1, np.iinfo(np.int64).max], dtype=np.int64),
        "i32": rng.integers(-2**31, 2**31 - 1, size=(2, 3), dtype=np.int32),
        "i8": np.arange(-128, 128, dtype=np.int8).reshape(16, 16),
        "bool": rng.random(7) < 0.5,
        "u8": np.array([0, 1, 250, 255], dtype=np.uint8),
        "i16": np.array([-32768, 5, 32767], dtype=np.int16),
        "u16": np.array([0, 65535], dtype=np.uint16),
        "u32": np.array([0, 4294967295], dtype=np.uint32),
        "be_f4": np.array([1.5, -2.25, 3e38], dtype=">f4"),
        "be_i8": np.array([-(2**40), 7], dtype=">i8"),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "rank4": np.arange(120, dtype=np.float64).reshape(2, 3, 4, 5) / 7,
    }


# ---- .npy and .npz --------------------------------------------------------------------------------

def test_npy(d):
    for name, arr in numpy_cases().items():
        path = os.path.join(d, f"{name}.npy")
        np.save(path, arr)
        try:
            check_tensor(f"npy from NumPy: {name}", dump(path), arr)
        except RuntimeError as e:
            check(f"npy from NumPy: {name}", False, str(e))
            continue
        out = os.path.join(d, f"{name}.out.npy")
        r = tool("roundtrip", path, out)
        if r.returncode != 0:
            check(f"npy to NumPy: {name}", False, r.stderr.strip())
            continue
        back = np.load(out)
        expect = arr.astype(NUMPY_OF[TESSERA_DTYPE[np.dtype(arr.dtype).newbyteorder("=")]])
        check(f"npy to NumPy: {name}", not arrays_equal(back, expect), arrays_equal(back, expect))
    # Format versions 2.0 and 3.0.
    arr = np.linspace(-1, 1, 10, dtype=np.float32)
    for version in [(2, 0), (3, 0)]:
        path = os.path.join(d, f"v{version[0]}.npy")
        with open(path, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)
        check_tensor(f"npy version {version[0]}.0", dump(path), arr)
    # Fortran order is refused with a clear message.
    path = os.path.join(d, "fortran.npy")
    np.save(path, np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    r = tool("dump", path)
    check("npy Fortran order is an error", r.returncode == 1 and "Fortran-order" in r.stderr and path in r.stderr,
          r.stderr.strip())
    # Truncated NumPy files: an error naming the file, at every length.
    full = open(os.path.join(d, "f64.npy"), "rb").read()
    bad = []
    for n in range(0, len(full), 7):
        cut = os.path.join(d, "cut.npy")
        open(cut, "wb").write(full[:n])
        r = tool("dump", cut)
        if r.returncode != 1 or not r.stderr.startswith(f"error: {cut}: "):
            bad.append(f"{n} bytes: rc={r.returncode} {r.stderr.strip()!r}")
    check("truncated .npy files are errors naming the file", not bad, "; ".join(bad[:3]))


def test_npz(d):
    cases = numpy_cases()
    for compressed in (False, True):
        kind = "savez_compressed" if compressed else "savez"
        path = os.path.join(d, f"{kind}.npz")
        (np.savez_compressed if compressed else np.savez)(path, **cases)
        got = dump(path)
        check(f"npz from NumPy ({kind}): names in order", got["order"] == list(cases), f"{got['order']}")
        for name, arr in cases.items():
            if name in got["tensors"]:
                check_tensor(f"npz from NumPy ({kind}): {name}", got["tensors"][name], arr)
        out = os.path.join(d, f"{kind}.out.npz")
        r = tool("roundtrip", path, out)
        if r.returncode != 0:
            check(f"npz to NumPy ({kind})", False, r.stderr.strip())
            continue
        with np.load(out) as z:
            problems = []
            if list(z.keys()) != list(cases):
                problems.append(f"keys {list(z.keys())}")
            for name, arr in cases.items():
                expect = arr.astype(NUMPY_OF[TESSERA_DTYPE[np.dtype(arr.dtype).newbyteorder("=")]])
                diff = arrays_equal(z[name], expect) if name in z else "missing"
                if diff:
                    problems.append(f"{name}: {diff}")
            check(f"npz to NumPy ({kind})", not problems, "; ".join(problems))
    # Positional arrays are arr_0, arr_1, ...
    path = os.path.join(d, "positional.npz")
    np.savez(path, np.ones(2, np.float32), np.zeros(3, np.int32))
    check("npz positional names", dump(path)["order"] == ["arr_0", "arr_1"])
    # A truncated archive.
    full = open(os.path.join(d, "savez_compressed.npz"), "rb").read()
    cut = os.path.join(d, "cut.npz")
    open(cut, "wb").write(full[: len(full) // 2])
    r = tool("dump", cut)
    check("truncated .npz is an error naming the file", r.returncode == 1 and r.stderr.startswith(f"error: {cut}: "),
          r.stderr.strip())


# ---- .safetensors, following https://github.com/huggingface/safetensors#format --------------------------

ST_ITEM = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "BOOL": 1,
           "F8_E4M3": 1, "F8_E5M2": 1, "U8": 1}


def st_write(path, tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw little-endian bytes)."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset, blobs = 0, []
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    """The spec's reader: returns (name -> (dtype, shape, raw), metadata, header length) and
    raises ValueError on anything the spec forbids."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    buf = data[8 + n:]
    meta = header.pop("__metadata__", {})
    out, spans = {}, []
    for name, info in header.items():
        b, e = info["data_offsets"]
        count = 1
        for s in info["shape"]:
            count *= s
        if e - b != count * ST_ITEM[info["dtype"]]:
            raise ValueError(f"{name}: size mismatch")
        out[name] = (info["dtype"], tuple(info["shape"]), buf[b:e])
        spans.append((b, e))
    pos = 0
    for b, e in sorted(spans):
        if b != pos:
            raise ValueError("hole or overlap")
        pos = e
    if pos != len(buf):
        raise ValueError("trailing data")
    return out, meta, n


def decode_e4m3(b):
    s, e, m = b >> 7, (b >> 3) & 15, b & 7
    if e == 15 and m == 7:
        return math.nan
    v = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if s else v


def decode_e5m2(b):
    s, e, m = b >> 7, (b >> 2) & 31, b & 3
    if e == 31:
        v = math.inf if m == 0 else math.nan
    else:
        v = (m / 4) * 2.0 ** -14 if e == 0 else (1 + m / 4) * 2.0 ** (e - 15)
    return -v if s else v


def bf16_values(bits):
    return [float(v) for v in (bits.astype(np.uint32) << 16).view(np.float32)]


def test_safetensors(d):
    rng = np.random.default_rng(1)
    bf16_bits = rng.integers(0, 65536, size=64, dtype=np.uint64).astype(np.uint16)
    fp8 = np.arange(256, dtype=np.uint8)
    f32 = rng.standard_normal((2, 3)).astype(np.float32)
    tensors = {
        "f64": ("F64", (2, 2), np.array([1.0, -0.0, np.inf, 1e-300]).tobytes()),
        "f32": ("F32", (2, 3), f32.tobytes()),
        "f16": ("F16", (3,), np.array([1.0, 65504.0, -6e-8], dtype=np.float16).tobytes()),
        "bf16": ("BF16", (8, 8), bf16_bits.tobytes()),
        "i64": ("I64", (2,), np.array([-(2**63), 2**63 - 1], dtype=np.int64).tobytes()),
        "i32": ("I32", (1, 2), np.array([-5, 7], dtype=np.int32).tobytes()),
        "i8": ("I8", (2,), np.array([-128, 127], dtype=np.int8).tobytes()),
        "bool": ("BOOL", (3,), bytes([1, 0, 1])),
        "e4m3": ("F8_E4M3", (16, 16), fp8.tobytes()),
        "e5m2": ("F8_E5M2", (256,), fp8.tobytes()),
        "u8": ("U8", (2,), bytes([3, 255])),
        "empty": ("F32", (0, 2), b""),
    }
    expected = {
        "f64": ("f64", [1.0, -0.0, math.inf, 1e-300]),
        "f32": ("f32", [float(v) for v in f32.ravel()]),
        "f16": ("f16", [1.0, 65504.0, float(np.float16(-6e-8))]),
        "bf16": ("bf16", bf16_values(bf16_bits)),
        "i64": ("i64", [-(2**63), 2**63 - 1]),
        "i32": ("i32", [-5, 7]),
        "i8": ("i8", [-128, 127]),
        "bool": ("bool", [1, 0, 1]),
        "e4m3": ("fp8_e4m3", [decode_e4m3(b) for b in range(256)]),
        "e5m2": ("fp8_e5m2", [decode_e5m2(b) for b in range(256)]),
        "u8": ("i32", [3, 255]),
        "empty": ("f32", []),
    }
    meta = {"format": "pt", "note": "written by test_formats.py"}
    path = os.path.join(d, "spec.safetensors")
    st_write(path, tensors, meta)
    got = dump(path)
    check("safetensors from the spec writer: metadata", got["metadata"] == meta, f"{got['metadata']}")
    check("safetensors from the spec writer: names in header order", got["order"] == list(tensors), f"{got['order']}")
    for name, (dt, values) in expected.items():
        t = got["tensors"].get(name)
        if t is None:
            check(f"safetensors from the spec writer: {name}", False, "missing")
            continue
        ok = t["dtype"] == dt and tuple(t["shape"]) == tensors[name][1]
        bad = compare_values(t["values"], values) if ok else f"{t['dtype']}{t['shape']}"
        check(f"safetensors from the spec writer: {name}", not bad, bad)

    out = os.path.join(d, "tessera.safetensors")
    r = tool("roundtrip", path, out)
    if r.returncode != 0:
        return check("safetensors from Tessera", False, r.stderr.strip())
    try:
        back, back_meta, hlen = st_read(out)
    except Exception as e:  # the spec reader's verdict
        return check("safetensors from Tessera: valid per the spec", False, repr(e))
    check("safetensors from Tessera: valid per the spec", True)
    check("safetensors from Tessera: header padded to 8 bytes", hlen % 8 == 0, str(hlen))
    check("safetensors from Tessera: metadata", back_meta == meta, f"{back_meta}")
    problems = []
    for name, (dt, shape, raw) in tensors.items():
        if name not in back:
            problems.append(f"{name} missing")
            continue
        bdt, bshape, braw = back[name]
        if name == "u8":  # widened to I32
            if (bdt, bshape, list(np.frombuffer(braw, np.int32))) != ("I32", shape, [3, 255]):
                problems.append(f"u8: {bdt} {bshape}")
        elif (bdt, bshape, braw) != (dt, shape, raw):
            problems.append(f"{name}: {bdt} {bshape} differs")
    check("safetensors from Tessera: same dtypes, shapes and bytes", not problems, "; ".join(problems))
    # Tessera orders tensors by element size, largest first, so that each is aligned to its size.
    header = json.loads(open(out, "rb").read()[8:8 + hlen])
    header.pop("__metadata__", None)
    aligned = all(info["data_offsets"][0] % ST_ITEM[info["dtype"]] == 0 for info in header.values())
    check("safetensors from Tessera: every tensor aligned to its element size", aligned)

    if torch is None:
        print("SKIP safetensors bf16 read by torch: torch is not importable")
    else:
        _, _, raw = back["bf16"]
        tv = torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).float().tolist()
        bad = compare_values(got["tensors"]["bf16"]["values"], tv)
        check("safetensors bf16 values match torch.bfloat16", not bad, bad)

    # Malformed files are errors naming the file.
    def blob(header, data):
        return struct.pack("<Q", len(header)) + header + data

    bad_files = {
        "not JSON": blob(b"{abc", b""),
        "header past the end": struct.pack("<Q", 1000) + b"{}",
        "a hole": blob(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', bytes(8)),
        "a wrong size": blob(b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(8)),
        "an unknown dtype": blob(b'{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}', bytes(8)),
        "too short": b"\x01\x02",
    }
    for what, blob in bad_files.items():
        p = os.path.join(d, "bad.safetensors")
        open(p, "wb").write(blob)
        r = tool("dump", p)
        check(f"safetensors with {what} is an error naming the file", r.returncode == 1 and r.stderr.startswith(f"error: {p}: "),
              f"rc={r.returncode} {r.stderr.strip()}")


# ---- rounding against NumPy (f16) and torch (bf16) -------------------------------------------------------

def rounding_inputs():
    rng = np.random.default_rng(2)
    x = np.concatenate([
        rng.standard_normal(20000) * 10.0 ** rng.integers(-9, 6, 20000),
        rng.standard_normal(1000) * 1e-6,
        # ties and near-ties of bf16 and f16 around 1 and in the subnormals
        1 + np.arange(-64, 64) * 2.0 ** -9, 1 + np.arange(-64, 64) * 2.0 ** -12, np.arange(64) * 2.0 ** -25,
        # f64 values just off f16 and bf16 ties, which rounding through f32 first would get wrong
        1 + 2.0 ** -11 + np.arange(-4, 5) * 2.0 ** -40, 1 + 2.0 ** -8 + np.arange(-4, 5) * 2.0 ** -40,
        [65504, 65519.99, 65520, 1e6, -1e6, 3.4e38, np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -1e-45],
    ])
    return x


def read_cast(path):
    back, _, _ = st_read(path)
    return back["x"]


def test_rounding(d):
    x64 = rounding_inputs()
    x32 = x64.astype(np.float32)
    for src, name in ((x32, "f32"), (x64, "f64")):
        p = os.path.join(d, f"x{name}.npy")
        np.save(p, src)
        out = os.path.join(d, f"x{name}.f16.safetensors")
        r = tool("cast", p, "f16", out)
        if r.returncode != 0:
            check(f"{name} -> f16 matches numpy astype", False, r.stderr.strip())
            continue
        dt, _, raw = read_cast(out)
        got = np.frombuffer(raw, np.uint16)
        with np.errstate(over="ignore"):
            want = src.astype(np.float16)
        nan = np.isnan(want)
        ok = dt == "F16" and np.array_equal(got[~nan], want.view(np.uint16)[~nan]) and np.all(np.isnan(got.view(np.float16)[nan]))
        check(f"{name} -> f16 nearest-even matches numpy astype (NumPy rounds f64 directly)", ok,
              f"{np.count_nonzero(got[~nan] != want.view(np.uint16)[~nan])} differ")
        # Saturation: what overflows (or is infinite) becomes +-65504.
        out = os.path.join(d, f"x{name}.f16sat.safetensors")
        tool("cast", p, "f16", out, "saturate")
        _, _, raw = read_cast(out)
        got = np.frombuffer(raw, np.float16)
        with np.errstate(over="ignore"):
            want = np.where(np.isinf(src.astype(np.float16)), np.sign(src) * 65504, src.astype(np.float16)).astype(np.float16)
        ok = np.array_equal(got, want, equal_nan=True)
        check(f"{name} -> f16 @saturate clamps to +-65504", ok)
    if torch is None:
        print("SKIP f32 -> bf16 vs torch: torch is not importable")
        return
    p = os.path.join(d, "xf32.npy")
    out = os.path.join(d, "xf32.bf16.safetensors")
    r = tool("cast", p, "bf16", out)
    dt, _, raw = read_cast(out)
    got = np.frombuffer(raw, np.uint16)
    want = torch.from_numpy(x32).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(x32)
    ok = dt == "BF16" and np.array_equal(got[~nan], want[~nan])
    check("f32 -> bf16 nearest-even matches torch", ok, f"{np.count_nonzero(got[~nan] != want[~nan])} differ")
    # bf16 saved to .npy is f32: NumPy sees torch's bf16 values exactly.
    outnpy = os.path.join(d, "xf32.bf16.npy")
    tool("cast", p, "bf16", outnpy)
    back = np.load(outnpy)
    tv = torch.from_numpy(x32).to(torch.bfloat16).float().numpy()
    check("bf16 saved as .npy loads in NumPy as float32 with torch's bf16 values",
          back.dtype == np.float32 and np.array_equal(back, tv, equal_nan=True))


# ---- CSV ----------------------------------------------------------------------------------------------

def test_csv(d):
    rng = np.random.default_rng(3)
    arr = rng.standard_normal((50, 7)) * 1000
    for name in ("a.csv", "a.csv.gz"):
        p = os.path.join(d, name)
        np.savetxt(p, arr, delimiter=",")
        for dt, npdt in (("f64", np.float64), ("f32", np.float32)):
            r = tool("csv", p, dt, ",")
            if r.returncode != 0:
                check(f"load_csv {name} {dt}", False, r.stderr.strip())
                continue
            want = np.loadtxt(p, delimiter=",", dtype=np.float64, ndmin=2).astype(npdt)
            check_tensor(f"load_csv {name} as {dt} matches numpy.loadtxt", json.loads(r.stdout), want, dt)
    ints = rng.integers(-1000, 1000, size=(9, 4))
    p = os.path.join(d, "i.tsv")
    np.savetxt(p, ints, delimiter="\t", fmt="%d")
    r = tool("csv", p, "i32", "\t")
    check_tensor("load_csv integers with a tab delimiter", json.loads(r.stdout), ints.astype(np.int32), "i32")
    p = os.path.join(d, "ragged.csv")
    open(p, "w").write("1,2,3\n4,5,6\n7,8\n")
    r = tool("csv", p, "f32", ",")
    check("load_csv ragged row is an error naming the line",
          r.returncode == 1 and r.stderr.strip() == f"error: {p}: line 3 has 2 fields, but line 1 has 3 (a ragged row)",
          r.stderr.strip())


def main():
    if not TOOL:
        print("usage: test_formats.py FORMATS_TOOL")
        print("0 passed, 1 failed")
        return 1
    with tempfile.TemporaryDirectory(prefix="tsr_formats_") as d:
        for test in (test_npy, test_npz, test_safetensors, test_rounding, test_csv):
            try:
                test(d)
            except Exception as e:  # a crash in one group is one failure, not the end of the run
                check(test.__name__, False, f"{type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
