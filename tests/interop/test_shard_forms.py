"""Runs check_shard_forms.py: zarr-python 3 and TensorStore read DataAxesFormats' packed shards
exactly when the shard shape is declared rounded up to whole inner chunks (the Zarr v3 view's form)."""
import check_shard_forms


def test_the_rounded_up_shard_shape_is_read_exactly_by_zarr_python_and_tensorstore(capsys):
    assert check_shard_forms.main() == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    # Julia's own form is what these readers refuse: the check can tell the two apart.
    assert out.count("julia") == 4 and out.count("refuses") == 4, out
