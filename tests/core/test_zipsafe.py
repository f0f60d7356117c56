"""One set of zip limits for model zips (import_model) and image zips (load_image_zip), each checked through
the real entry point with a zip built here."""

from __future__ import annotations

import io
import stat
import zipfile

import pytest

from ortlab.core import zipsafe
from ortlab.data.loaders import load_image_zip
from ortlab.core.errors import DataError, ModelLoadError
from ortlab.model.importing import import_model


def zip_of(entries: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in entries.items():
            zf.writestr(zipfile.ZipInfo(name), data, compress_type=compression)
    return buf.getvalue()


@pytest.fixture(params=["images", "model"])
def load(request, tmp_path):
    """Open a zip the way the Data page (DataError) or the model import (ModelLoadError) does."""
    if request.param == "images":
        return lambda data: load_image_zip(data), DataError
    return lambda data: import_model(data, tmp_path / "store"), ModelLoadError


def refused(load, data: bytes, pattern: str) -> str:
    fn, error = load
    with pytest.raises(error, match=pattern) as err:
        fn(data)
    return str(err.value)


@pytest.mark.parametrize("name", ["/etc/x.png", "C:/x.png", "C:\\x.png", "\\\\server\\x.png"])
def test_absolute_paths(load, name):
    refused(load, zip_of({name: b"x"}), r"contains an absolute path .*relative to the archive")


@pytest.mark.parametrize("name", ["../x.png", "a/../../x.png", "a\\..\\..\\x.png"])
def test_parent_folder_paths(load, name):
    refused(load, zip_of({name: b"x"}), r"contains a path that leaves its folder")


def test_symlinks(load):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo("link.png")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    refused(load, buf.getvalue(), r"contains a symbolic link .*not links to them")


def test_encrypted_members(load):
    data = bytearray(zip_of({"a.png": b"x"}))
    cd = data.rindex(b"PK\x01\x02")
    data[cd + 8] |= 0x1  # the "encrypted" flag in the central directory (zipfile cannot write encrypted zips)
    data[6] |= 0x1  # and in the local header
    refused(load, bytes(data), r"is encrypted; use an unencrypted zip")


def test_long_names(load):
    ok = "a" * 251 + ".png"  # 255 bytes
    assert zipsafe.member_parts(f"dir/{ok}", DataError) == ("dir", ok)
    refused(load, zip_of({"dir/" + "a" * 252 + ".png": b"x"}), r"name of 256 bytes .*at most 255 bytes")
    refused(load, zip_of({"é" * 128 + "/x.png": b"x"}), r"name of 256 bytes")  # bytes, not characters


def test_nesting_depth(load):
    assert len(zipsafe.member_parts("d/" * zipsafe.MAX_DEPTH + "x.png", DataError)) == zipsafe.MAX_DEPTH + 1
    refused(load, zip_of({"d/" * (zipsafe.MAX_DEPTH + 1) + "x.png": b"x"}),
            rf"nested {zipsafe.MAX_DEPTH + 1} folders deep .*at most {zipsafe.MAX_DEPTH} .*Flatten")


def test_two_thousand_folders_deep_is_a_clear_error_not_a_recursion_error(load):
    message = refused(load, zip_of({"d/" * 2000 + "x.png": b"x"}), r"nested 2000 folders deep")
    assert len(message) < 600  # the name is shown shortened, the reason and the limit are not


def test_member_count(load, monkeypatch):
    monkeypatch.setattr(zipsafe, "MAX_MEMBERS", 3)
    refused(load, zip_of({f"{i}.png": b"x" for i in range(4)}), r"has 4 members; at most 3 are accepted")


def test_ratio_of_every_member_not_only_big_ones(load):
    data = zip_of({"a.png": b"\0" * 200_000}, zipfile.ZIP_DEFLATED)  # 200 kB, far below 16 MiB
    assert len(data) < 2_000
    refused(load, data, r"member 'a.png' expands \d+× its compressed size \(at most 200× is accepted\).*zip bomb")


def test_sum_of_uncompressed_sizes(load, monkeypatch):
    monkeypatch.setattr(zipsafe, "MAX_TOTAL_BYTES", 1000)
    refused(load, zip_of({"a.png": b"x" * 600, "b.png": b"y" * 600}),
            r"expands to more than 1.00 kB \(the limit for one zip\).*Split it")


def test_a_member_larger_than_its_header_says_is_refused():
    data = bytearray(zip_of({"a.png": b"x" * 100}))
    # shrink the declared size in the central directory and the local header: the bytes stay 100
    cd = data.rindex(b"PK\x01\x02")
    data[cd + 24:cd + 28] = (10).to_bytes(4, "little")
    data[22:26] = (10).to_bytes(4, "little")
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        (parts, info), = zipsafe.safe_members(zf, DataError)
        with pytest.raises((DataError, zipfile.BadZipFile)):
            zipsafe.read_member(zf, info, DataError)
