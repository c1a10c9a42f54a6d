"""Rebuild the DOCX and EPUB sample files next to this script with pandoc (run by hand; the tests
only read the files). See SOURCES.md for what each file is and its licence.

    python tests/ingest/files/make_samples.py   # needs pandoc on PATH (Debian: apt-get install pandoc)
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GUTENBERG = HERE.parents[2].parent / "shared" / "cases" / "text" / "gutenberg"
ALICE = GUTENBERG / "alice-in-wonderland-pg11.txt"
AROUND = GUTENBERG / "around-the-world-in-80-days-pg103.txt"

SETTINGS_MD = """\
# Settings

The server reads its settings from environment variables with the prefix `DOCQA_`. Each one has a
default; unknown variables are ignored.

## Context and threads

1. Pick the context size first: it bounds the longest document.
2. Then the threads: decode and prefill threads default to the number of cores.

| variable | default | meaning |
|---|---|---|
| DOCQA_N_CTX | 32768 | context tokens (document + question + answer) |
| DOCQA_N_BATCH | 512 | prefill chunk |
| DOCQA_ANSWER_RESERVE | 1024 | tokens kept for question + answer |
| DOCQA_EXTRACT_TIMEOUT_S | 60 | wall-clock limit of one text extraction |

## Notes

- A quantized V cache needs flash attention.
- Unknown settings are ignored, so check the spelling of each one.
"""


def alice_markdown(first: int, last: int) -> str:
    """Chapters ``first``..``last`` of Alice (Project Gutenberg #11) as Markdown: a heading per
    chapter, paragraphs, and the poems as line blocks so that pandoc keeps their lines."""
    raw = ALICE.read_text(encoding="utf-8-sig")
    parts = re.split(r"\n\n\n(CHAPTER [IVX]+\.)\n(.+)\n", "\n\n\nCHAPTER I.\nDown the Rabbit-Hole\n" + raw)
    out = []
    for i in range(1, len(parts) - 2, 3):
        number = (i - 1) // 3 + 1
        if not first <= number <= last:
            continue
        out.append(f"# {parts[i]} {parts[i + 1]}\n")
        for para in parts[i + 2].strip().split("\n\n"):
            lines = para.strip("\n").split("\n")
            if any(line.startswith(" ") for line in lines[1:]):  # verse: keep the lines
                out.append("\n".join("| " + line.replace("    ", "\u00a0\u00a0\u00a0\u00a0") for line in lines))
            else:
                out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out) + "\n"


def around_markdown(n_chars: int = 16_000) -> str:
    """The opening paragraphs of Around the World in Eighty Days (Project Gutenberg #103, one
    paragraph per line in the source) under a title and a chapter heading."""
    paras, total = [], 0
    for para in AROUND.read_text(encoding="utf-8-sig").split("\n\n"):
        if total > n_chars:
            break
        paras.append(para.strip())
        total += len(para)
    return "# Around the World in Eighty Days\n\n## Chapter I\n\n" + "\n\n".join(paras) + "\n"


def pandoc(markdown: str, out: Path, *extra: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".md", encoding="utf-8") as f:
        f.write(markdown)
        f.flush()
        subprocess.run(["pandoc", "--from", "markdown-smart", f.name, "-o", str(out), *extra], check=True)


def main() -> None:
    pandoc(alice_markdown(1, 1), HERE / "alice-ch1.docx")
    pandoc(
        alice_markdown(1, 2),
        HERE / "alice-ch1-2.epub",
        "--metadata",
        "title=Alice's Adventures in Wonderland",
        "--metadata",
        "author=Lewis Carroll",
        "--metadata",
        "lang=en",
    )
    pandoc(SETTINGS_MD, HERE / "settings-table.docx")
    # Markdown as people write it: hard-wrapped at 72 columns (pandoc's default), ATX headings.
    pandoc(around_markdown(), HERE / "around-the-world-opening.md", "--to", "markdown-smart", "--columns", "72")
    pandoc(SETTINGS_MD, HERE / "settings-table.epub", "--metadata", "title=docqa settings", "--metadata", "lang=en")


if __name__ == "__main__":
    main()
