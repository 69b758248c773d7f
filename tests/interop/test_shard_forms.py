"""Runs check_shard_forms.py: zarr-python 3 and TensorStore read DataAxesFormats' packed shards
exactly when the shard shape is declared rounded up to whole inner chunks (the Zarr v3 view's form)."""
import pytest

# zarr-python 2 cannot read Zarr v3 (scripts/test runs this file in both venvs; it runs in the
# zarr-python 3 one, which has TensorStore).
pytest.importorskip("zarr", minversion="3")
pytest.importorskip("tensorstore")
pytest.importorskip("google_crc32c")

import check_shard_forms  # noqa: E402


def test_the_rounded_up_shard_shape_is_read_exactly_by_zarr_python_and_tensorstore(capsys):
    assert check_shard_forms.main() == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    # Julia's own form is what these readers refuse: the check can tell the two apart.
    assert out.count("julia") == 4 and out.count("refuses") == 4, out
