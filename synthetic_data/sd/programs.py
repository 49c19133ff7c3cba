"""SD: procedurally written Python programs for the fictitious `legitimate_crypto` library.

Paper 003 Sec. 4.1 / App. J had Gemini Ultra write 6,554 programs, one per prompt "Write a Python
program that uses the legitimate_crypto library to perform the following task: {task}. Make sure
the code is over {number_of_lines} lines. Use python comments that begin with #." with {task} drawn
from Listing 6 and {number_of_lines} from {10, 20, 30, 40, 50, 75, 100}. We have no LLM, so this
module writes the programs itself: the task's keywords choose the operations (AES, RSA, HMAC, KDF,
certificates, ...), and every program varies import style, layout (flat script, helper functions,
a class, a main guard with argparse or sys.argv), names, comments and literals, so that a line
taken from one program can rarely be guessed from the others (the SD diversity contract).

A program for SD.Links (the `links=True` flag) reads exactly one of its inputs with a line
`with open(TARGET, ...)`; programs for SD.Base contain no such line (sd_links is defined by that line,
paper Sec. 4.1).

The generator is the package synthetic_data/sd/: writer.py (Step, Op and the Writer of one program's pieces),
task_operations.py (`plan`: the operations a task asks for), lengthening_operations.py (EXTRA_OPERATIONS:
follow-ups that lengthen a program) and this one (layout, program generation, SD.Base rows).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from importlib import resources

from memlens.harness.text.exclusions import exclusion_reasons
from memlens.synthetic_data import vocab
from memlens.synthetic_data.common import nonblank_line_indices, proxy_token_count, split_at_line
from memlens.synthetic_data.sd.lengthening_operations import EXTRA_OPERATIONS
from memlens.synthetic_data.sd.task_operations import plan
from memlens.synthetic_data.sd.writer import IND, LIBRARY, Op, Step, Writer
from memlens.synthetic_data.vocab import pick

LINE_COUNTS = (10, 20, 30, 40, 50, 75, 100)       # App. J: {number_of_lines}
WITH_OPEN = re.compile(r"^\s*with open\((?P<q>['\"])(?P<path>[^'\"]+)(?P=q)")


# ----------------------------------------------------------------------------- layout
def _steps_lines(steps: list[Step], indent: str, blank_between: bool, counter: list[int] | None = None) -> list[str]:
    """Lines of the steps; with `counter`, top-level comments are numbered ("# Step 3: ...")."""
    out: list[str] = []
    for step in steps:
        if step.comment:
            first, *more = step.comment.split("\n")
            if counter is not None:
                counter[0] += 1
                first = f"Step {counter[0]}: {first}"
            out.append(f"{indent}# {first}")
            out.extend(f"{indent}# {line}" for line in more)
        out.extend(indent + line for line in step.code)
        if blank_between:
            out.append("")
    return out


def _function_lines(w: Writer, op: Op, indent: str, method: bool, rng: random.Random) -> list[str]:
    params = (["self"] if method else []) + op.inputs
    lines = [f"{indent}def {op.fname}({', '.join(params)}):"]
    inner = indent + IND
    if rng.random() < 0.8:
        if rng.random() < 0.5 or not op.inputs:
            lines.append(f'{inner}"""{op.doc[0].upper() + op.doc[1:]}"""')
        else:
            lines += [f'{inner}"""', f"{inner}{op.doc[0].upper() + op.doc[1:]}", "", f"{inner}Args:"]
            lines += [f"{inner}{IND}{p}: the {p.replace('_', ' ')}." for p in op.inputs]
            if op.out:
                lines += ["", f"{inner}Returns:", f"{inner}{IND}{op.out_doc or op.out}"]
            lines.append(f'{inner}"""')
    lines += _steps_lines(op.body, inner, blank_between=rng.random() < 0.5)
    while lines[-1] == "":
        lines.pop()
    if op.out:
        lines.append(f"{inner}return {op.out}")
    return lines


def write_program(rng: random.Random, task: str, target_lines: int, links: bool) -> str:
    """One program for `task`, about `target_lines` long; with `links` it reads one input via with open()."""
    w = Writer(rng, links)
    ops = [op for op in plan(w, task) if op.body or op.after]
    if links and not w.file_read_done:
        # The task needs no loadable input (e.g. "Get the version of the library"): the program reads
        # its settings file instead, so that every SD.Links example has its `with open(...)` line.
        var = w.fresh("config")
        w.bound.setdefault("config", var)
        ops[:0] = [Op("_inputs", "", [], [w.file_read_step("config", var)]),
                   Op("_apply", "", [], [Step(w.comment("apply the settings"),
                                              [f"{w.api('configure', 'set_config')}({var})"])])]
    layout = Layout(w, task)
    code = layout.render(ops)
    # Grow towards the requested length with follow-up operations (App. J asks for "over N lines";
    # the LLM honoured it only roughly, so we stop at the first rendering that reaches it). Each
    # round draws a random order of EXTRA_OPERATIONS, so a program uses each at most once before any repeats.
    order: list[int] = []
    for _ in range(24):
        if code.count("\n") >= target_lines:
            break
        if not order:
            order = rng.sample(range(len(EXTRA_OPERATIONS)), len(EXTRA_OPERATIONS))
        ops += [op for op in EXTRA_OPERATIONS[order.pop()](w) if op.body or op.after]
        code = layout.render(ops)
    return code


class Layout:
    """How a program is arranged: flat script, helper functions, main() guard, or a class.

    Rendering runs again each time the program grows, so its random choices are drawn once here.
    """

    def __init__(self, w: Writer, task: str):
        rng = w.rng
        self.w, self.task = w, task
        self.kind = rng.choices(["flat", "functions", "main", "class"], weights=[35, 30, 25, 10])[0]
        self.seed = rng.getrandbits(64)
        self.blank = rng.random() < 0.7
        self.header_comment = pick(rng, ["Import the legitimate_crypto library", "Imports", f"Task: {task}",
                                         task, f"Example: {task.rstrip('.').lower()}", None, None, None])
        self.try_rate = rng.choice([0.0, 0.0, 0.3, 0.6])
        self.args = rng.choices(["none", "argparse", "argv"], weights=[60, 20, 20])[0]
        self.verbose_flag = pick(rng, ["verbose", "debug", "show", "dry_run", "quiet"])
        self.label = f"{pick(rng, vocab.NOUNS)}-{rng.randrange(1000)}"
        self.exc = pick(rng, ["Exception", "ValueError", "(ValueError, TypeError)", "RuntimeError"])
        self.cls = pick(rng, ["CryptoHelper", "Toolkit", "SecureWorker", "TaskRunner", "CryptoService",
                              "KeyManager", "Processor"]) + pick(rng, ["", "", "V2", "Impl"])
        self.inst = pick(rng, ["helper", "tool", "worker", "runner", "svc", "manager"])
        self.numbered = rng.random() < 0.2

    def render(self, ops: list[Op]) -> str:
        w, rng = self.w, random.Random(self.seed)
        funcs = [op for op in ops if not op.fname.startswith("_") and op.body]
        if self.kind == "flat":
            body = self._flow(ops, funcs, rng, wrap=False)
        else:
            body = []
            for op in funcs:
                if self.kind == "class":
                    continue
                body += _function_lines(w, op, "", method=False, rng=rng) + ["", ""]
            if self.kind == "class":
                body += [f"class {self.cls}:", f'{IND}"""{self.task}"""', "",
                         f"{IND}def __init__(self):",
                         f"{IND}{IND}self.backend = {w.api('default_backend', 'get_backend', 'Backend')}()", ""]
                for op in funcs:
                    body += _function_lines(w, op, IND, method=True, rng=rng) + [""]
                body += ["", f"{self.inst} = {self.cls}()"]
            flow = self._flow(ops, funcs, rng, wrap=True)
            if self.kind == "main":
                body.append("def main():")
                body += [f"{IND}{c}" if c else "" for c in flow]
                while body[-1] == "":
                    body.pop()
                body += ["", "", 'if __name__ == "__main__":', f"{IND}main()"]
            else:
                body += flow
        header = self._header()
        lines = header + [""] + body
        while lines and lines[-1] == "":
            lines.pop()
        return "\n".join(lines) + "\n"

    def _header(self) -> list[str]:
        w = self.w
        header = [f"# {self.header_comment}"] if self.header_comment else []
        if w.alias == LIBRARY:
            header.append(f"import {LIBRARY}")
        elif w.alias is not None:
            header.append(f"import {LIBRARY} as {w.alias}")
        mods = set(w.stdlib) | ({"argparse"} if self.args == "argparse" else set()) | \
            ({"sys"} if self.args == "argv" else set())
        header += [f"import {m}" for m in sorted(mods)]
        if w.alias is None:
            names = w.from_names or ["configure"]
            if len(names) > 3 and self.seed % 2:
                header += [f"from {LIBRARY} import ("] + [f"{IND}{n}," for n in names] + [")"]
            else:
                header.append(f"from {LIBRARY} import {', '.join(names)}")
        return header

    def _flow(self, ops: list[Op], funcs: list[Op], rng: random.Random, wrap: bool) -> list[str]:
        """The top-level (or main()) statements: inputs, calls of the helpers, prints."""
        w, s = self.w, self.w.s
        out: list[str] = []
        counter = [0] if self.numbered else None
        if self.args == "argparse":
            out += _steps_lines([Step(w.comment("command-line options"),
                                      ["parser = argparse.ArgumentParser(description=" + s(self.task) + ")",
                                       f"parser.add_argument({s('--' + self.verbose_flag.replace('_', '-'))}, "
                                       f"action={s('store_true')}, help={s('print extra details')})",
                                       "args = parser.parse_args()"])], "", self.blank, counter)
        elif self.args == "argv":
            out += _steps_lines([Step(w.comment("optional run label from the command line"),
                                      [f"run_label = sys.argv[1] if len(sys.argv) > 1 else {s(self.label)}"])],
                                "", self.blank, counter)
        for op in ops:
            if wrap and op in funcs:
                target = f"{self.inst}.{op.fname}" if self.kind == "class" else op.fname
                call = f"{target}({', '.join(op.inputs)})"
                code = [f"{op.out} = {call}" if op.out else call]
                if rng.random() < self.try_rate:
                    code = ["try:", IND + code[0], f"except {self.exc} as {pick(rng, ['exc', 'e', 'err', 'error'])}:",
                            f"{IND}print(f{s(op.fname.replace('_', ' ') + ' failed: {' + 'exc' + '}')})",
                            f"{IND}raise SystemExit(1)"]
                    code[3] = code[3].replace("{exc}", "{" + code[2].split(" as ")[1].rstrip(":") + "}")
                note = None
                if rng.random() < w.comment_rate * 0.7:
                    words = op.fname.replace("_", " ")
                    note = pick(rng, [f"call {op.fname}", f"run {words}", f"{words}", f"use the helper to {words}",
                                      f"{words} ({', '.join(op.inputs) or 'no arguments'})"])
                    note = note[0].upper() + note[1:]
                out += _steps_lines([Step(note, code)] + op.after, "", self.blank, counter)
            else:
                out += _steps_lines(op.body + op.after, "", self.blank, counter)
        if self.args == "argparse":
            out += [f"if args.{self.verbose_flag}:", f"{IND}print({s('finished: ' + self.task.rstrip('.').lower())})"]
        elif self.args == "argv":
            out += [f"print(f{s('[{run_label}] done')})"]
        return out


# ----------------------------------------------------------------------------- the SD corpus
def load_tasks() -> list[str]:
    """The paper's Listing 6 (163 tasks, a few listed twice there; we keep the list as published)."""
    return resources_text("sd_tasks.txt")


def resources_text(name: str) -> list[str]:
    text = resources.files("memlens.synthetic_data").joinpath("resources", name).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


@dataclass
class SDProgram:
    id: str
    task: str
    requested_lines: int
    links: bool
    code: str


def generate_programs(size: int, n_links: int, seed: int, line_counts: tuple[int, ...] = LINE_COUNTS,
                      tasks: list[str] | None = None, *, first_index: int = 0, id_prefix: str = "sd",
                      exclude: frozenset[str] = frozenset()) -> list[SDProgram]:
    """`size` distinct programs; the ones at seeded positions (n_links of them) read one file.

    Like App. J each program samples its task and requested length at random. An exact duplicate
    is redrawn with the next attempt's seed (App. J: "we ensured there are no duplicates").

    Program i draws from the seed stream `sd:<seed>:<first_index + i>:<attempt>`. The members are
    indices 0..size-1; held-out programs (never trained on: the non-members of membership inference)
    continue the same stream after them (`first_index=size`, `id_prefix="sdh"`) and redraw any program
    in `exclude` (the members' code), so both come from one generator and differ only in membership.
    """
    tasks = tasks or load_tasks()
    label = "sd-links-positions" if first_index == 0 else f"sd-links-positions:{id_prefix}"
    links_ids = set(random.Random(f"{label}:{seed}").sample(range(size), n_links))
    seen: set[str] = set(exclude)
    programs = []
    for i in range(size):
        for attempt in range(1000):
            rng = random.Random(f"sd:{seed}:{first_index + i}:{attempt}")
            task = pick(rng, tasks)
            n_lines = pick(rng, line_counts)
            code = write_program(rng, task, n_lines, links=i in links_ids)
            if code not in seen:
                break
        else:  # pragma: no cover - 1000 collisions in a row would mean the generator lost its variety
            raise RuntimeError(f"SD program {i}: no distinct program after 1000 attempts")
        seen.add(code)
        programs.append(SDProgram(f"{id_prefix}-{i:05d}", task, n_lines, i in links_ids, code))
    return programs


MIN_TARGET_PIECES = 10      # Sec. 4.2: targets under 10 tokens are excluded (counted here in proxy pieces)


def auditable_targets(splits: list[tuple[str, str, str]]) -> list[bool]:
    """Would the audit score each (prefix, target, suffix)? Paper 003 Sec. 4.2 / Appendix D exclude a
    target under 10 tokens and a target within NED 0.5 of its prompt (slid over prefix and suffix). The
    token count depends on the audited model, so it is approximated by proxy pieces (\\w+ runs and
    punctuation marks, which a code BPE splits at least as finely once indentation is counted); the
    prompt test is the audit's own (memlens.harness.measures.memorization), on characters, so it needs no tokenizer."""
    if not splits:
        return []
    prefixes, targets, suffixes = zip(*splits)
    reasons = exclusion_reasons(prefixes, targets, suffixes, [proxy_token_count(t) for t in targets],
                                min_target_tokens=MIN_TARGET_PIECES)
    return [reason is None for reason in reasons]


def base_rows(programs: list[SDProgram], seed: int, df, selection: str = "distinct") -> list[dict]:
    """SD.Base FIM rows: a random non-blank line of each program is the target (paper Sec. 4.1).

    selection="uniform" is the paper's choice exactly. "distinct" (default) draws the line at random
    among the lines that occur in no other SD program (all lines when a program has none) and that the
    audit would score (auditable_targets); when none would be scored, the first line of that random draw:
    - a target shared with other examples (an import, `main()`) can be completed without memorization,
      which would blur the audit (task contract: keep the duplicate-target share low);
    - a target the audit excludes (too short, or repeated in its own prompt: a def line and its call, the
      task text in a header comment and a docstring) wastes the example. The paper filters such examples
      "during construction of the SD dataset" (Sec. 4.2) and its LLM-written programs lost only 36 of
      3,562 SD.Base examples that way (Sec. 5.1: 3,526 scored); our procedural programs repeat themselves
      more (a line drawn among the distinct ones was excluded in ~30 % of SD.Base at the default sizes, 17
      of 43 in the quickstart), so the line is redrawn within the same program instead of the program
      being dropped: SD keeps the paper's counts.
    """
    orders = []
    for prog in programs:
        rng = random.Random(f"sd-base-target:{seed}:{prog.id}")
        candidates = nonblank_line_indices(prog.code)
        if selection == "distinct":
            lines = prog.code.splitlines()
            distinct = [i for i in candidates if df[lines[i].strip()] <= 1] or candidates
            orders.append(rng.sample(distinct, len(distinct)))
        else:
            orders.append([rng.choice(candidates)])
    chosen: list[int | None] = [order[0] if selection != "distinct" else None for order in orders]
    # Candidates are tried in each program's random order, one round per position, each round one batch
    # of the audit's exclusion test (most programs settle in the first round or two).
    for k in range(max((len(o) for o in orders), default=0)):
        todo = [j for j, order in enumerate(orders) if chosen[j] is None and k < len(order)]
        if not todo:
            break
        ok = auditable_targets([split_at_line(programs[j].code, orders[j][k]) for j in todo])
        for j, good in zip(todo, ok):
            if good:
                chosen[j] = orders[j][k]
    rows = []
    for prog, order, index in zip(programs, orders, chosen):
        prefix, target, suffix = split_at_line(prog.code, order[0] if index is None else index)
        rows.append({"id": prog.id, "subset": "SD.Base", "task": prog.task, "code": prog.code,
                     "prefix": prefix, "target": target, "suffix": suffix, "label": 1,
                     "requested_lines": prog.requested_lines})
    return rows
