"""Which chat settings give SmolLM2-135M-Instruct its best answers to everyday questions.

    python -m bench.chat_defaults [--seeds 3] [--max-tokens 64] [--threads 2]
                                  [--out bench/results/chat_defaults.json]

The flagship bundle (convert.flagship, converted once from its GGUF) answers `QUESTIONS`, 22
everyday questions with known answers (facts, simple lists, definitions, short how-tos, two
sums), through `runtime.load(...).chat`, with every request submitted at once so the engine
batches them. Each reply is scored automatically:

- correct: every group of `expected` words is found in it (a group is a set of alternatives,
  whole words, case-insensitive; a list question asks for `need` of its group);
- loop: the share of its word 4-grams that repeat an earlier 4-gram (seq-rep-4); a reply with
  more than `LOOP_REP4` of them is a loop;
- tokens: its length.

A setting's score is the share of its replies that are correct and not a loop (with 66 replies, a
standard error of about 0.05). Two stages keep the run small (660 replies): stage 1 compares system
prompts (greedy and the app's former sampling default, T 0.7 / top-p 0.95), stage 2 compares
sampling settings (temperature, top-p, min-p, repetition penalty) under stage 1's best system
prompt; every sampled setting runs with `--seeds` seeds. On two free cores it takes about nine
minutes (22 greedy replies in 18 s); the committed run took 28 on the shared machine. The app's Chat
defaults (ui/chat_tab.py) and its example prompts (questions the chosen setting answered right with
every seed) come from this run; docs/APP.md gives the table. This module measures; it changes
nothing in the app.
"""

from __future__ import annotations

import argparse
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import common

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "chat_defaults.json"
LOOP_REP4 = 0.2  # a reply with more than this share of repeated word 4-grams is a loop
CONCURRENT = 48  # requests in flight at once (the engine batches up to 64 rows)


@dataclass(frozen=True)
class Question:
    text: str
    kind: str  # fact, list, definition, how-to or sum
    expected: tuple[tuple[str, ...], ...]  # groups of alternatives; every group must be found
    need: int = 1  # for a single group: how many of its alternatives (a list question)


def q(text: str, kind: str, *groups: str, need: int = 1) -> Question:
    return Question(text, kind, tuple(tuple(group.split("|")) for group in groups), need)


FRUITS = "apple|apples|banana|bananas|orange|oranges|grape|grapes|pear|pears|mango|mangoes"
FRUITS += "|strawberry|strawberries|cherry|cherries|peach|peaches|pineapple|lemon|lemons|kiwi"
QUESTIONS = [
    q("What is the capital of France?", "fact", "paris"),
    q("What is the capital of Japan?", "fact", "tokyo"),
    q("How many days are there in a week?", "fact", "seven|7"),
    q("What is the largest planet in our solar system?", "fact", "jupiter"),
    q("Who wrote Romeo and Juliet?", "fact", "shakespeare"),
    q("At what temperature does water boil, in degrees Celsius?", "fact", "100"),
    q("What do bees make?", "fact", "honey"),
    q("How many legs does a spider have?", "fact", "eight|8"),
    q("Which animal is known as the king of the jungle?", "fact", "lion|lions"),
    q("What language is spoken in Spain?", "fact", "spanish"),
    q("What gas do humans breathe out?", "fact", "carbon dioxide|co2"),
    q("Name three primary colors.", "list", "red|blue|yellow", need=3),
    q("Name three fruits.", "list", FRUITS, need=3),
    q("List the four seasons of the year.", "list", "spring|summer|autumn|fall|winter", need=4),
    q("What is photosynthesis?", "definition", "light|sunlight", "plant|plants"),
    q("What is a noun?", "definition", "person|place|thing|name|word"),
    q("What is gravity?", "definition", "force|attract|attraction|pull|pulls"),
    q("What is H2O?", "definition", "water"),
    q("How do I boil an egg?", "how-to", "water", "boil|boiling", "minutes|minute"),
    q("Give me one tip for sleeping better.", "how-to", "bed|bedtime|sleep|screen|screens"),
    q("What is 2 plus 2?", "sum", "four|4"),
    q("What is 7 times 8?", "sum", "56|fifty-six"),
]
SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SYSTEM_PROMPTS = {
    "SmolLM's own": SMOLLM_SYSTEM,
    "brief": "You are a helpful assistant. Answer briefly.",  # the app's former default
    "brief, English": "You are a helpful assistant. Answer in one or two sentences, in English.",
}
GREEDY = {"do_sample": False}
FORMER = {"do_sample": True, "temperature": 0.7, "top_p": 0.95}  # the app's former default
SAMPLING = {  # stage 2, under stage 1's best system prompt
    "T 0.2, top-p 0.9": {"do_sample": True, "temperature": 0.2, "top_p": 0.9},
    "T 0.2, top-p 0.9, rep 1.1": {
        "do_sample": True,
        "temperature": 0.2,
        "top_p": 0.9,
        "repetition_penalty": 1.1,
    },
    "T 0.4, min-p 0.1": {"do_sample": True, "temperature": 0.4, "min_p": 0.1},
    "T 0.4, min-p 0.1, rep 1.1": {
        "do_sample": True,
        "temperature": 0.4,
        "min_p": 0.1,
        "repetition_penalty": 1.1,
    },
    "T 0.7, min-p 0.1": {"do_sample": True, "temperature": 0.7, "min_p": 0.1},
    "T 1.0, min-p 0.1": {"do_sample": True, "temperature": 1.0, "min_p": 0.1},
}
WORD = re.compile(r"\w+")


def found(reply: str, question: Question) -> bool:
    """Whether every expected group is in `reply` (whole words, any case).

    >>> found("Paris is the capital.", QUESTIONS[0]), found("Lyon.", QUESTIONS[0])
    (True, False)
    >>> found("Red, blue and green.", QUESTIONS[11])  # two of three primary colours
    False
    """
    text = reply.lower()
    for group in question.expected:
        hits = {word for word in group if re.search(rf"\b{re.escape(word)}\b", text)}
        if len(hits) < (question.need if len(question.expected) == 1 else 1):
            return False
    return True


def repeated_4grams(reply: str) -> float:
    """Share of the reply's word 4-grams that repeat an earlier one (0 for a short reply).

    >>> repeated_4grams("a b c d a b c d")  # 5 four-grams, 1 repeats the first
    0.2
    """
    words = WORD.findall(reply.lower())
    grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    return (len(grams) - len(set(grams))) / len(grams) if grams else 0.0


def run_setting(gen, pool, system: str, settings: dict, seeds: list[int], max_tokens: int):
    """Every question answered under one setting with every seed: a list of reply records."""
    import runtime

    def ask(question: Question, seed: int) -> dict:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": question.text})
        config = runtime.GenerationConfig(max_new_tokens=max_tokens, seed=seed, **settings)
        out = gen.chat(messages, config)[0]
        rep4 = repeated_4grams(out.text)
        return {
            "question": question.text,
            "seed": seed,
            "reply": out.text,
            "correct": found(out.text, question),
            "rep4": round(rep4, 3),
            "loop": rep4 > LOOP_REP4,
            "tokens": len(out.token_ids),
            "finish_reason": out.finish_reason,
        }

    jobs = [(question, seed) for question in QUESTIONS for seed in seeds]
    return list(pool.map(lambda job: ask(*job), jobs))


def summary(name: str, system: str, settings: dict, replies: list[dict]) -> dict:
    n = len(replies)
    good = sum(r["correct"] and not r["loop"] for r in replies)
    return {
        "setting": name,
        "system_prompt": system,
        "settings": settings,
        "replies": n,
        "score": good / n,
        "correct": sum(r["correct"] for r in replies) / n,
        "loops": sum(r["loop"] for r in replies) / n,
        "mean_rep4": sum(r["rep4"] for r in replies) / n,
        "mean_tokens": sum(r["tokens"] for r in replies) / n,
        "cut_at_max": sum(r["finish_reason"] == "length" for r in replies) / n,
    }


def by_question(replies: list[dict]) -> dict[str, float]:
    """Each question's share of correct, loop-free replies."""
    shares = {}
    for question in QUESTIONS:
        mine = [r for r in replies if r["question"] == question.text]
        shares[question.text] = sum(r["correct"] and not r["loop"] for r in mine) / len(mine)
    return shares


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per sampled setting")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    from tqdm import tqdm

    import runtime
    from convert import flagship

    gen = runtime.load(flagship.ensure_bundle(), threads=args.threads)
    seeds = list(range(1, args.seeds + 1))
    plan = [
        ("1", f"{name} · greedy", system, GREEDY, [0]) for name, system in SYSTEM_PROMPTS.items()
    ]
    plan += [
        ("1", f"{name} · T 0.7, top-p 0.95", system, FORMER, seeds)
        for name, system in SYSTEM_PROMPTS.items()
    ]
    rows, replies, started = [], {}, time.perf_counter()
    with ThreadPoolExecutor(CONCURRENT) as pool:
        for stage in ("1", "2"):
            if stage == "2":
                stage1 = [row for row in rows if row["stage"] == "1"]
                best = max(stage1, key=lambda row: row["score"])
                plan = [
                    ("2", name, best["system_prompt"], settings, seeds)
                    for name, settings in SAMPLING.items()
                ]
            for stage_name, label, system, settings, run_seeds in tqdm(plan, desc=f"stage {stage}"):
                got = run_setting(gen, pool, system, settings, run_seeds, args.max_tokens)
                rows.append({"stage": stage_name} | summary(label, system, settings, got))
                replies[label] = got
    best = max((row for row in rows if row["settings"]["do_sample"]), key=lambda r: r["score"])
    shares = by_question(replies[best["setting"]])
    payload = {
        "model": gen.name,
        "questions": [question.__dict__ for question in QUESTIONS],
        "max_new_tokens": args.max_tokens,
        "seeds": seeds,
        "loop_rep4": LOOP_REP4,
        "environment": common.environment(args.threads),
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
        "best_sampled": best["setting"],
        "best_sampled_by_question": shares,
        "replies": replies,
    }
    header = ["stage", "setting", "score", "correct", "loops", "mean tokens", "cut at max"]
    table = [
        [r["stage"], r["setting"], r["score"], r["correct"], r["loops"], r["mean_tokens"]]
        + [r["cut_at_max"]]
        for r in rows
    ]
    print(common.markdown_table(header, table))
    print(f"best sampled setting: {best['setting']} (score {best['score']:.2f})")
    common.write_results(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
