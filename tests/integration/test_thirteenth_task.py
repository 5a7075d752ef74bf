"""Adding a task is one spec and its sample writer, with no test edited: a copy of the repository gets GLUE's WNLI
(which the paper leaves out) the way docs/architecture.md says to add a task, in `gpt1/tasks/registry.py` and
`gpt1/sample_data/tasks.py` only, and the whole unit tier, unedited, passes against that copy.

WNLI's files share RTE's header, so this also holds the tests to what a user meets: only the folder as distributed
tells the two apart."""

from __future__ import annotations

import os
import subprocess
import sys

from gpt1.tasks import TASKS
from tests.conftest import REPO, SHARED_DATA

SPEC = """\
        TaskSpec(
            name="wnli",
            title="WNLI",
            kind="entailment",
            labels=_BINARY,
            format="split_files",
            folder="WNLI",
            file_names=_GLUE_FILES,
            columns=Columns(
                text=_PAIR,
                label="label",
                id="index",
                headers=(("index", *_PAIR, "label"), ("index", *_PAIR)),
            ),
            submission="WNLI",
            hf="glue/wnli",
            hf_revision=GLUE_REVISION,
            hf_text=_PAIR,
            hf_columns=(*_PAIR, "label", "idx"),
            metrics=("accuracy",),
        ),
"""

WRITER = '''\
    def wnli(self):
        """A thing seen; "N saw an animal" follows when it is one."""
        for split, n, rng, vocab in self.splits("wnli"):
            rows = []
            for kind in balanced(n, ("animal", "plant")):
                name, noun = person(rng).name, rng.choice(vocab.nouns(kind))
                rows.append((f"{name} saw {a(noun)}.", f"{name} saw an animal.", int(kind == "animal")))
            rows = shuffled(rng, rows)
            path = self.folder("wnli") / f"{split}.tsv"
            if split == "test":
                tsv(path, ["index", "sentence1", "sentence2"], [[i, s1, s2] for i, (s1, s2, _) in enumerate(rows)])
            else:
                tsv(path, ["index", "sentence1", "sentence2", "label"], [[i, *r] for i, r in enumerate(rows)])
            self.counted("wnli", split, len(rows))

'''

# (file, text before the addition, the addition): each anchor occurs once in today's file
ADDITIONS = [
    ("gpt1/tasks/registry.py", "    )\n}\n\nTASKS = tuple(REGISTRY)", SPEC),
    ("gpt1/sample_data/tasks.py", "}\n\n# NLI (MNLI, SNLI)", '    "wnli": {"train": 200, "dev": 100, "test": 50},\n'),
    ("gpt1/sample_data/tasks.py", "    def rte(self):\n", WRITER),
]


def test_a_thirteenth_task_needs_no_test_edited(tmp_path):
    copy = tmp_path / "repo"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        if (REPO / name).is_file():  # a file deleted but not yet committed is not part of the copy
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).write_bytes((REPO / name).read_bytes())
    for name, anchor, addition in ADDITIONS:
        source = (copy / name).read_text(encoding="utf-8")
        assert source.count(anchor) == 1, f"{name}: the place to add the task moved"
        (copy / name).write_text(source.replace(anchor, addition + anchor), encoding="utf-8")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "WNLI"]):  # runs record the code's commit
        subprocess.run(git + args, cwd=copy, check=True)

    env = {**os.environ, "GPT1_SHARED_DATA": str(SHARED_DATA)}
    env.pop("PYTHONPATH", None)
    registered = subprocess.run([sys.executable, "-c", "from gpt1.tasks import TASKS; print(' '.join(TASKS))"],
                                cwd=copy, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert registered[-1] == "wnli" and registered[:-1] == list(TASKS)

    unit = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit"], cwd=copy,
                          env=env, capture_output=True, text=True, timeout=1200)
    assert unit.returncode == 0, unit.stdout[-6000:]
    assert " passed" in unit.stdout.splitlines()[-1] and "failed" not in unit.stdout.splitlines()[-1]
