"""Corpus sources for ingestion: what `gpt1 ingest --source` accepts, read as a stream of records.

    DIR                  every .txt/.jsonl/.parquet file under DIR (recursive; hidden files and out_dir skipped)
    GLOB or FILE         the matching files: .jsonl and .parquet by suffix, anything else is read as a text file
    hf:ID[@REV][:SPLIT]  a `datasets` dataset, streamed: a hub id (REV pins it), a local folder of json/parquet
                         files (a hub parquet repo as downloaded: DIR/data/<split>-00000-of-00001.parquet), or a
                         `save_to_disk` folder; SPLIT defaults to train

A record is one .txt file or one row. Hub BooksCorpus (`bookcorpus/bookcorpus`) has one sentence per row, in book
order but with no book id, so its rows are grouped into documents of BOOKCORPUS_ROWS_PER_DOC consecutive rows (~15k
words, dozens of 512-token blocks): the split then holds out whole stretches of text instead of single sentences
whose neighbours sit in train, the `_start_` boundary comes once per stretch rather than every sentence, and dedup
compares stretches, not frequent short sentences ("he said."). Other row sources default to one row per document;
`rows_per_doc` overrides (rows are grouped within a file, never across files).

Inputs that cannot be used (binary, undecodable, unreadable) are named in the `Report` and the run continues;
unreadable includes a name the walk finds that is not a regular file (a FIFO, a device, a dangling symlink, a
symlink loop) or a book larger than MAX_BOOK_BYTES. Such a path given alone, or a source with nothing else, is
an InputError naming it.
Malformed rows (bad JSON, missing/null/non-text field) are counted with file and line; above MAX_MALFORMED_SHARE
of the rows the run fails: the column or file is wrong. A hub dataset that cannot be fetched (no network, offline
mode, not in the cache) is one InputError saying how to supply it as a local folder.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import re
from collections import Counter, defaultdict
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from gpt1.data.ingest.clean import UndecodableError, decode
from gpt1.io import InputError, check_input_file, sha256_file, sha256_tree, stable_hash

log = logging.getLogger(__name__)

MAX_MALFORMED_SHARE = 0.01
MAX_EXAMPLES = 20  # examples kept (and warnings logged) per reject reason, fallback encoding, ...
BOOKCORPUS_ROWS_PER_DOC = 1000
SENTENCE_PER_ROW_DATASETS = {"bookcorpus", "bookcorpus/bookcorpus"}
DIR_SUFFIXES = {".txt", ".jsonl", ".parquet"}
MAX_BOOK_BYTES = 1 << 30  # a .txt book is read whole into memory; .jsonl and .parquet are streamed


@dataclass
class Record:
    source: str  # where it came from: file name, "file:line", "file:first-last" for grouped rows
    text: str
    grouped_rows: bool = (
        False  # several rows, one per line: those line breaks are row boundaries, not wraps
    )


@dataclass
class Tally:
    """A count plus its first few examples, the way stats.json reports rejects, duplicates and fallbacks."""

    count: int = 0
    examples: list[Any] = field(default_factory=list)

    def add(self, example: Any) -> bool:
        """Count `example`; True if it was kept as an example (callers log only those)."""
        self.count += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(example)
            return True
        return False

    def as_dict(self) -> dict:
        return {"count": self.count, "examples": self.examples}


class Report:
    """What stats.json says about the inputs, filled in while the records stream past."""

    def __init__(self) -> None:
        self.files = self.rows = self.records = 0
        self.rejects: dict[str, Tally] = defaultdict(Tally)
        self.malformed = Tally()
        self.fallbacks: dict[str, Tally] = defaultdict(Tally)
        self.duplicates = Tally()
        self.boilerplate: Counter[str] = Counter()
        self.unwrapped: Counter[str] = Counter()

    def reject(self, reason: str, source: str, detail: str) -> None:
        if self.rejects[reason].add(source):
            log.warning("%s: rejected (%s): %s", source, reason, detail)

    def malformed_row(self, file: str, line: int, error: str) -> None:
        if self.malformed.add({"file": file, "line": line, "error": error}):
            log.warning("%s:%d: malformed row: %s", file, line, error)

    def check_malformed(self) -> None:
        if self.rows and self.malformed.count / self.rows > MAX_MALFORMED_SHARE:
            first = self.malformed.examples[0]
            raise InputError(
                f"{self.malformed.count} of {self.rows} rows are malformed (more than {MAX_MALFORMED_SHARE:.0%}); "
                f"first: {first['error']}",
                file=first["file"],
                line=first["line"],
            )

    def as_dict(self) -> dict:
        return {
            "inputs": {"files": self.files, "rows": self.rows, "records": self.records},
            "duplicates": self.duplicates.as_dict(),
            "rejects": {reason: tally.as_dict() for reason, tally in sorted(self.rejects.items())},
            "malformed_rows": self.malformed.as_dict(),
            "decode_fallbacks": {
                enc: tally.as_dict() for enc, tally in sorted(self.fallbacks.items())
            },
            "boilerplate_removed": {
                k: self.boilerplate[k] for k in ("header", "footer", "notes", "characters")
            },
            "unwrapped": {
                k: self.unwrapped[k] for k in ("paragraphs", "lines_joined", "paragraphs_kept")
            },
        }


# -- sources: each yields Records and reports what it could not use ------------------------------------------------
class MalformedRow(Exception):
    """A row without usable text; the message says what is wrong with it."""


def _field(obj: Any, column: str) -> str:
    """The row's text; MalformedRow when it has none."""
    if not isinstance(obj, dict):
        raise MalformedRow(f"not a JSON object ({type(obj).__name__})")
    if column not in obj:
        raise MalformedRow(f"no {column!r} field")
    value = obj[column]
    if value is None:
        raise MalformedRow(f"{column!r} is null")
    if not isinstance(value, str):
        raise MalformedRow(f"{column!r} is {type(value).__name__}, not text")
    return value


def _text_file(path: Path, name: str, report: Report) -> Iterator[Record]:
    try:
        data = path.read_bytes()
    except OSError as err:
        report.reject("unreadable", name, str(err))
        return
    try:
        text, encoding = decode(data)
    except UndecodableError as err:
        report.reject(err.reason, name, str(err))
        return
    if encoding != "utf-8" and report.fallbacks[encoding].add(name):
        log.info("%s: not UTF-8, read as %s", name, encoding)
    yield Record(name, text)


def _jsonl_rows(
    path: Path, name: str, column: str, report: Report
) -> Iterator[tuple[str, int, str]]:
    with open(path, "rb") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            report.rows += 1
            try:
                text = _field(json.loads(line), column)
            except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
                report.malformed_row(name, line_no, f"invalid JSON: {err}")
                continue
            except MalformedRow as err:
                report.malformed_row(name, line_no, str(err))
                continue
            yield name, line_no, text


def _parquet_rows(
    path: Path, name: str, column: str, report: Report
) -> Iterator[tuple[str, int, str]]:
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=1024, columns=[column])
    except (OSError, pa.ArrowException) as err:
        report.reject("unreadable", name, f"not a readable Parquet file: {err}")
        return
    row = 0
    for batch in batches:
        for value in batch.column(0).to_pylist():
            row += 1
            report.rows += 1
            if value is None:
                report.malformed_row(name, row, f"{column!r} is null")
                continue
            yield name, row, value


def _grouped(rows: Iterator[tuple[str, int, str]], rows_per_doc: int) -> Iterator[Record]:
    """One record per row, or per `rows_per_doc` consecutive rows (one per line); `rows` comes from one file."""
    group: list[tuple[str, int, str]] = []
    for row in rows:
        group.append(row)
        if len(group) == rows_per_doc:
            yield _join(group)
            group = []
    if group:
        yield _join(group)


def _join(group: list[tuple[str, int, str]]) -> Record:
    name, first, _ = group[0]
    where = f"{first}" if len(group) == 1 else f"{first}-{group[-1][1]}"
    return Record(
        f"{name}:{where}", "\n".join(text for _, _, text in group), grouped_rows=len(group) > 1
    )


class FileSource:
    """A directory, glob or single file of .txt books and/or .jsonl/.parquet files with a text column."""

    rows_per_doc = 1

    def __init__(self, spec: str, exclude: Path | None = None):
        self.spec = spec
        path = Path(spec).expanduser()
        if path.is_dir():
            found = [
                (p.relative_to(path).as_posix(), p)
                for p in sorted(path.rglob("*"))
                if p.suffix.lower() in DIR_SUFFIXES
                and not p.is_dir()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            ]
        elif path.exists() or path.is_symlink():  # one file: what it is decides, not its suffix
            found = [(str(path), path)]
        else:
            matches = sorted(map(Path, glob.glob(str(path), recursive=True)))
            found = [(str(p), p) for p in matches if not p.is_dir()]
        if exclude is not None:  # an out_dir inside the source dir must not feed the next run
            found = [(n, p) for n, p in found if not _inside(p, exclude)]
        # Names that are not readable files are reported as rejects, never skipped without a word.
        self.unusable: list[tuple[str, InputError]] = []
        self.files = []
        for name, p in found:
            limit = MAX_BOOK_BYTES if p.suffix.lower() not in (".jsonl", ".parquet") else None
            try:
                self.files.append((name, check_input_file(p, what="corpus file", max_bytes=limit)))
            except InputError as err:
                self.unusable.append((name, err))
        if not self.files and self.unusable:
            raise self.unusable[0][1]
        if not self.files:
            raise FileNotFoundError(
                f"{spec}: no input files (expected a directory or glob of .txt/.jsonl/.parquet "
                f"files, a single file, or hf:<id>[@revision][:split])"
            )

    def fingerprint(self) -> str:
        return stable_hash([(name, sha256_file(path)) for name, path in self.files], length=64)

    def check(self, column: str) -> None:
        """Fail before any work if a jsonl/parquet file lacks the text column (judged on its first valid row)."""
        for name, path in self.files:
            suffix = path.suffix.lower()
            if suffix == ".parquet":
                _check_parquet_column(path, name, column)
            elif suffix == ".jsonl":
                _check_jsonl_column(path, name, column)

    def records(
        self, column: str, rows_per_doc: int, report: Report
    ) -> Generator[Record, None, None]:
        for name, problem in self.unusable:
            report.files += 1
            report.reject("unreadable", name, str(problem))
        for name, path in self.files:
            report.files += 1
            suffix = path.suffix.lower()
            if suffix == ".jsonl":
                yield from _grouped(_jsonl_rows(path, name, column, report), rows_per_doc)
            elif suffix == ".parquet":
                yield from _grouped(_parquet_rows(path, name, column, report), rows_per_doc)
            else:
                yield from _text_file(path, name, report)

    @property
    def total(self) -> int | None:
        """Records to expect, when known up front (text files only): for the progress bar."""
        only_text = all(p.suffix.lower() not in (".jsonl", ".parquet") for _, p in self.files)
        return len(self.files) if only_text else None


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path` (its target; a dangling symlink or a loop by its own folder) lies under `folder`."""
    where = path.resolve() if path.exists() else path.parent.resolve() / path.name
    return where.is_relative_to(folder.resolve())


def _check_parquet_column(path: Path, name: str, column: str) -> None:
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException):
        return  # rejected as unreadable during the run
    if column not in schema.names:
        raise InputError(
            f"no column {column!r} (columns: {', '.join(schema.names)}); choose one with --text-column",
            file=name,
            field=column,
        )
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise InputError(f"column {column!r} holds {kind}, not text", file=name, field=column)


def _check_jsonl_column(path: Path, name: str, column: str) -> None:
    with open(path, "rb") as fh:
        for line_no, line in enumerate(fh, 1):
            try:
                obj = json.loads(line) if line.strip() else None
            except ValueError:
                continue  # counted as malformed during the run
            if isinstance(obj, dict):
                if column not in obj:
                    raise InputError(
                        f"no {column!r} field (fields: {', '.join(obj)}); choose one with "
                        f"--text-column",
                        file=name,
                        line=line_no,
                        field=column,
                    )
                return


class HubRows(Protocol):
    """What HFSource uses of the `datasets` Dataset (a saved folder) or IterableDataset (streamed) it opens."""

    @property
    def column_names(self) -> list[str] | None: ...

    def __iter__(self) -> Iterator[Any]: ...


class HFSource:
    """`hf:ID[@REV][:SPLIT]` through `datasets`, streamed. ID is a hub id or a local folder."""

    def __init__(self, spec: str):
        match = re.fullmatch(r"hf:([^@:]+)(?:@([^:]+))?(?::([^:]+))?", spec)
        if not match:
            raise ValueError(f"{spec!r}: expected hf:<id>[@revision][:split]")
        self.spec = spec
        self.id, self.revision, self.split = (
            match.group(1),
            match.group(2),
            match.group(3) or "train",
        )
        self.folder = Path(self.id).expanduser()
        self.local = self.folder.is_dir()
        if not self.local and self.id.startswith((".", "/", "~")):
            raise FileNotFoundError(f"{spec}: no such folder {self.folder}")
        if self.local and self.revision:
            raise ValueError(
                f"{spec}: @revision applies to hub datasets, not the local folder {self.folder}"
            )
        self.rows_per_doc = (
            BOOKCORPUS_ROWS_PER_DOC if self.id.lower() in SENTENCE_PER_ROW_DATASETS else 1
        )
        self.total: int | None = None  # a stream's length is not known up front
        self._dataset: HubRows | None = None

    def fingerprint(self) -> str:
        if self.local:
            return stable_hash({"folder": sha256_tree(self.folder), "split": self.split}, length=64)
        if not self.revision:
            log.warning(
                "hf:%s has no @revision: a re-run cannot tell if the hub copy changed", self.id
            )
        return stable_hash(
            {"hf": self.id, "revision": self.revision, "split": self.split}, length=64
        )

    def _open(self) -> HubRows:
        import datasets  # slow import, only for this source

        with self._hub_errors():
            if (self.folder / "state.json").exists() or (
                self.folder / "dataset_dict.json"
            ).exists():
                # memory-mapped Arrow: iterating streams
                data = datasets.load_from_disk(str(self.folder))
                if isinstance(data, datasets.DatasetDict):
                    if self.split not in data:
                        raise ValueError(
                            f"hf:{self.id}: no split {self.split!r} (splits: {', '.join(data)})"
                        )
                    data = data[self.split]
                return data
            return datasets.load_dataset(
                str(self.folder) if self.local else self.id,
                revision=self.revision,
                split=self.split,
                streaming=True,
            )

    @contextlib.contextmanager
    def _hub_errors(self) -> Iterator[None]:
        """A hub dataset that cannot be fetched (no network, offline mode, not in the cache), when opened or
        later while streaming, becomes one line naming the source and how to supply it locally."""
        try:
            yield
        except (
            ConnectionError
        ) as err:  # requests' and huggingface_hub's offline/unreachable errors included
            if self.local:
                raise
            raise InputError(
                f"{self.spec}: cannot fetch it from the Hugging Face Hub, and it is not in the local cache ({err}). "
                f"Supply it locally: where there is network, `datasets.load_dataset({self.id!r}"
                f"{f', revision={self.revision!r}' if self.revision else ''}).save_to_disk(DIR)` (or download the "
                f"repo's parquet files into DIR/data/), then use --source hf:DIR:{self.split}"
            ) from None

    def check(self, column: str) -> None:
        self._dataset = dataset = self._open()
        # None when a streamed dataset does not declare its features
        columns = dataset.column_names
        if columns is not None and column not in columns:
            raise InputError(
                f"no column {column!r} (columns: {', '.join(columns)}); choose one with --text-column",
                file=f"hf:{self.id}:{self.split}",
                field=column,
            )

    def records(
        self, column: str, rows_per_doc: int, report: Report
    ) -> Generator[Record, None, None]:
        name = f"{self.id}:{self.split}"

        def rows() -> Iterator[tuple[str, int, str]]:
            with self._hub_errors():
                for row_no, row in enumerate(
                    self._dataset if self._dataset is not None else self._open(), 1
                ):
                    report.rows += 1
                    try:
                        text = _field(row, column)
                    except MalformedRow as err:
                        report.malformed_row(name, row_no, str(err))
                        continue
                    yield name, row_no, text

        yield from _grouped(rows(), rows_per_doc)


def open_source(spec: str, exclude: Path | None = None) -> FileSource | HFSource:
    return HFSource(spec) if spec.startswith("hf:") else FileSource(spec, exclude)
