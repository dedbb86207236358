"""The episode viewer (leaderboards.view), opened in a real headless Chromium: episodes rendered from traces that
the trainer's own writer made of real rollouts (the toy env's scripted policies) and real credit assignment
(GRPO-OR and MT-GRPO on the same tasks), token colours by advantage sign, filters from the URL hash, escaping of
hostile agent text, a screenshot; and the page of the committed wiki_mtgrpo experiment."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from leaderboards import view
from tests.trainers import toy_env

pytest.importorskip("torch")
pytest.importorskip("transformers")

ENV = "tests.trainers.toy_env:" + toy_env.ENV_ID
REPO = Path(__file__).resolve().parents[2]
STRATEGIES = ("grpo_or", "mt_grpo")
HOSTILE = "</script><script>document.body.dataset.pwned='1'</script><img src=x onerror=alert(1)>"
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(
    BROWSER is None,
    reason="needs Debian's chromium (headless), which scripts/setup.sh installs: apt-get install chromium",
)


def _play(tokenizer, *, tasks: int, group: int, seed: int):
    from trainers.engines import stop_token_ids
    from trainers.rollout import EnvPool, RolloutConfig, collect, scripted_actor

    pool = EnvPool([ENV])
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    actor = scripted_actor(tokenizer, eos, ["reference", "direct"], [0.5, 0.5])
    try:
        return collect(pool, actor, tokenizer, stop_token_ids(tokenizer), RolloutConfig(32, 512, 2),
                       num_tasks=tasks, group_size=group, seed=seed)[0]  # fmt: skip
    finally:
        pool.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs (grpo_or, mt_grpo) of 3 steps on the same tasks, written by trainers.loggers.RunRecorder: metrics,
    training traces, held-out traces; grpo_or also has final-eval transcripts and one hostile episode."""
    from agentgym_turn.models import load_tokenizer
    from leaderboards.evaluate import Transcript, write_transcripts
    from leaderboards.families import EpisodeResult
    from trainers.credit import CreditConfig, get_strategy, response_mask
    from trainers.engines import stop_token_ids
    from trainers.instruments import advantage_difference, turn_signal
    from trainers.loggers import RunRecorder, make_loggers, read_trace, write_trace
    from trainers.metrics import episode_summary
    from trainers.rollout import decode

    tok = load_tokenizer("smollm2")
    root = tmp_path_factory.mktemp("runs")
    held = _play(tok, tasks=3, group=1, seed=12_345)
    for strategy in STRATEGIES:
        run = root / strategy
        rec = RunRecorder(run, make_loggers("jsonl", run), tok, strategy, trace_every=1, trace_episodes=6, last_step=3)
        (run / "config.json").write_text(json.dumps({"strategy": strategy, "env": [ENV]}))
        rec.log({"step": 0, **{f"eval/{k}": v for k, v in episode_summary(held, stop_token_ids(tok)).items()}})
        rec.record_eval(0, {ENV: held})
        for step in (1, 2, 3):
            episodes = _play(tok, tasks=2, group=3, seed=step)  # the same tasks for both strategies
            credit = get_strategy(strategy)(episodes, None, CreditConfig())
            signal = {**turn_signal(episodes), **advantage_difference(episodes, credit, CreditConfig())}
            rec.log({"step": step, **episode_summary(episodes, stop_token_ids(tok)), **signal})
            rec.record_step(step, episodes, credit)
        rec.close()
    run = root / "grpo_or"
    trace = run / "traces" / "step_000003.jsonl.gz"
    records = read_trace(trace)
    bad = json.loads(json.dumps(records[0]))
    bad["turns"][0]["tokens"] = [HOSTILE, " & <b>not bold</b>"]
    bad["turns"][0]["adv"] = [-0.5, 0.5]
    bad["turns"][0]["env"] = "<|im_start|>user\n<result>a < b && c > d</result>"
    bad["task"], bad["group"] = "Hostile <i>task</i>", 99
    write_trace(trace, [*records, bad])
    results = [EpisodeResult(ep.group, 0, ep.metrics) for ep in held]
    texts = [decode(tok, ep.token_ids[response_mask(ep)].tolist()) for ep in held]
    write_transcripts(run / "final-eval" / "transcripts" / "Arith-v0.jsonl", results,
                      [Transcript("", t, ep.turn_rewards) for t, ep in zip(texts, held, strict=True)])  # fmt: skip
    (run / "final-eval" / "Arith-v0.jsonl").write_text(
        json.dumps({"env_id": ENV, "env_kwargs": {}, "seed": 12_345, "episodes": 3}) + "\n"
    )
    return root


class Elements(HTMLParser):
    """Start tags of a dumped DOM: (tag, attributes, text right after it)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str], list[str]]] = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, {k: v or "" for k, v in attrs}, []))

    def handle_data(self, data):
        if self.found:
            self.found[-1][2].append(data)

    def with_class(self, name: str) -> list[tuple[dict[str, str], str]]:
        return [(a, "".join(t)) for tag, a, t in self.found if name in a.get("class", "").split()]


def chromium(url: str, *extra: str) -> str:
    """Headless Chromium's stdout for ``url`` (the DOM after the page's script ran with ``--dump-dom``)."""
    with tempfile.TemporaryDirectory() as profile:
        argv = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", *extra, url]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def dom(page: Path, hash_: str = "") -> Elements:
    parsed = Elements()
    parsed.feed(chromium(page.resolve().as_uri() + hash_, "--dump-dom"))
    return parsed


@pytest.fixture(scope="module")
def page(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "view.html"
    view.main([str(runs), "--out", str(out)])
    return out


def test_page_is_self_contained_bounded_and_escapes_agent_text(page, runs):
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)|url\(|@import|<link\b""", text, re.I)
    assert HOSTILE not in text and "</script><script>document" not in text
    assert text.count("<script") == 2 and text.count("</script>") == 2  # the data and the viewer, nothing injected
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)[1])
    assert {r["label"]: r["strategy"] for r in data["runs"]} == {"grpo_or": "grpo_or", "mt_grpo": "mt_grpo"}
    kinds = [(e["kind"], data["runs"][e["run"]]["label"]) for e in data["episodes"]]
    # 3 steps x 6 traced episodes (+1 hostile), 3 held-out episodes at step 0, 3 final-eval transcripts
    assert kinds.count(("train", "grpo_or")) == 19 and kinds.count(("train", "mt_grpo")) == 18
    assert kinds.count(("eval", "mt_grpo")) == 3 and kinds.count(("final", "grpo_or")) == 3
    finals = [e for e in data["episodes"] if e["kind"] == "final"]
    evals = {data["tasks"][e["task"]] for e in data["episodes"] if e["kind"] == "eval"}
    assert {data["tasks"][e["task"]] for e in finals} == evals  # the evaluation's tasks, recovered from its seed
    assert all(e["turns"][0]["adv"] is None and e["turns"][0]["text"] for e in finals)
    assert any(len(e["turns"]) == 2 and "<result>" in e["turns"][0]["env"] for e in finals)  # split per turn
    assert view.NO_ADVANTAGE_NOTE[:60] in text
    charts = re.findall(r'<svg class="curve" data-key="([^"]+)"', text)  # the credit instruments follow the curves
    assert charts[-2:] == ["credit/adv_differs_from_grpo_or", "credit/turn_varying_episodes"]
    assert "credit/turn1_reward_varies" in charts and "credit/turn1_distinct_actions" in charts
    view.main([str(runs), "--out", str(page.with_name("small.html")), "--max-steps", "1", "--episodes-per-step", "2"])
    small = json.loads(re.search(r'id="data">(.*?)</script>', page.with_name("small.html").read_text(), re.S)[1])
    assert sorted({e["step"] for e in small["episodes"] if e["kind"] == "train"}) == [3]
    assert len(small["episodes"]) == 2 * 2 + 2 * 3 + 3


@needs_browser
def test_browser_renders_episodes_token_colours_and_hash_filters(page, runs, tmp_path):
    data = json.loads(re.search(r'id="data">(.*?)</script>', page.read_text(), re.S)[1])
    everything = dom(page)
    (body,) = [a for tag, a, _ in everything.found if tag == "body"]
    assert body.get("data-rendered") == "1" and "data-pwned" not in body
    cards = everything.with_class("episode")
    assert len(cards) == len(data["episodes"])
    tokens = everything.with_class("tok")
    pos = [(a, t) for a, t in tokens if "pos" in a["class"].split()]
    neg = [(a, t) for a, t in tokens if "neg" in a["class"].split()]
    assert pos and neg
    assert all(float(a["data-adv"]) > 0 and "rgba(33, 102, 172" in a["style"] for a, _ in pos)
    assert all(float(a["data-adv"]) < 0 and "rgba(178, 24, 43" in a["style"] for a, _ in neg)
    assert all(a["title"].startswith("advantage ") for a, _ in pos + neg)
    assert any(t == HOSTILE for _, t in neg)  # shown as text, not run
    assert [tag for tag, a, _ in everything.found if a.get("src") == "x"] == []
    assert len(everything.with_class("curve")) >= 2  # the metric curves

    mt = dom(page, "#strategy=mt_grpo")
    strategies = {a["data-strategy"] for a, _ in mt.with_class("episode")}
    assert strategies == {"mt_grpo"}
    assert len(mt.with_class("episode")) == sum(
        data["runs"][e["run"]]["strategy"] == "mt_grpo" for e in data["episodes"]
    )

    task = next(e["task"] for e in data["episodes"] if e["kind"] == "train" and e["step"] == 2)
    same = dom(page, f"#kind=train&step=2&task={task}")
    cards = same.with_class("episode")
    assert {(a["data-kind"], a["data-step"], a["data-task"]) for a, _ in cards} == {("train", "2", str(task))}
    assert {a["data-strategy"] for a, _ in cards} == set(STRATEGIES)  # side by side on the same task
    # MT-GRPO credits turns separately: within one episode, tokens of one turn share one advantage
    for ep in (e for e in data["episodes"] if e["kind"] == "train" and data["runs"][e["run"]]["strategy"] == "mt_grpo"):
        assert all(len(set(t["adv"])) == 1 for t in ep["turns"] if t["adv"])

    cut = sorted(e["ret"] for e in data["episodes"])[len(data["episodes"]) // 2]  # the median return
    good = dom(page, f"#minret={cut}")
    shown = [float(a["data-ret"]) for a, _ in good.with_class("episode")]
    assert len(shown) == sum(e["ret"] >= cut for e in data["episodes"]) and min(shown) >= cut

    shot = Path(os.environ.get("VIEW_SCREENSHOT", tmp_path / "view.png"))
    chromium(page.resolve().as_uri() + "#kind=train&step=2", f"--screenshot={shot}", "--window-size=1280,1100",
             "--hide-scrollbars")  # fmt: skip
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000


def test_errors_name_the_folder_and_the_fix(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        view.main([str(tmp_path)])
    assert exc.value.code == 2 and "holds no metrics.jsonl" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        view.main([str(tmp_path / "missing")])
    assert "is not a folder" in capsys.readouterr().err


def test_run_labels_and_step_picks():
    assert view.run_labels([Path("/x/a/seed0"), Path("/x/b/seed0")]) == ["a/seed0", "b/seed0"]
    assert view.pick_steps(list(range(1, 13)), 4, None) == [1, 5, 8, 12]
    assert view.pick_steps([1, 5, 10], 6, [5, 7]) == [5]
    turns = view.split_chatml_turns(
        "<a>x</a><|im_end|>\n<|im_start|>user\nR<|im_end|>\n<|im_start|>assistant\nB<|im_end|>", 2
    )
    assert turns == [("<a>x</a><|im_end|>", "\n<|im_start|>user\nR<|im_end|>\n<|im_start|>assistant\n"),
                     ("B<|im_end|>", "")]  # fmt: skip


def test_committed_experiment_page_is_small_and_shows_both_arms():
    page = REPO / "leaderboards" / "views" / "wiki_mtgrpo.html"
    text = page.read_text()
    assert page.stat().st_size < 2_000_000
    data = json.loads(re.search(r'id="data">(.*?)</script>', text, re.S)[1])
    assert {"grpo_or", "mt_grpo"} <= {r["strategy"] for r in data["runs"]}
    finals = [e for e in data["episodes"] if e["kind"] == "final"]
    by_task: dict[int, set[str]] = {}
    for e in finals:
        by_task.setdefault(e["task"], set()).add(data["runs"][e["run"]]["strategy"])
    assert any({"grpo_or", "mt_grpo"} <= s for s in by_task.values())  # the same held-out task under both
    assert view.NO_ADVANTAGE_NOTE[:60] in text
