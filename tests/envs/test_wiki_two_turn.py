"""TurnRL/WikiTwoTurn-v2: reward tables from the MT-GRPO paper (000 §3.2, Tables 1, 3, 4), episode flow, fuzzing."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgym_turn.corpus import Document
from agentgym_turn.error import InvalidArgument, InvalidTask
from agentgym_turn.policies import get_scripted_policy, run_episode
from agentgym_turn.retrieval.lucene import corpus_index
from envs.wiki_two_turn import rewards as R
from envs.wiki_two_turn.env import NO_TOOL_ERROR, WikiTwoTurnEnv

GACY = {
    "question": "What serial killer, who buried the remains of 26 of his victims in his Chicago crawl space, was "
    "known as the 'Killer Clown'?",
    "answers": ["John Wayne Gacy"],
}
CARMEN = {"question": "What is an opera in four acts by the French composer Georges Bizet?", "answers": ["Carmen"]}
THEM = {"question": "In the horror film Them, what type of creatures were Them?", "answers": ["Giant ants", "ants"]}
PETERSON = {
    "question": "Who was the Canadian jazz pianist (1925-2007), winner of eight Grammy Awards who released over "
    "200 recordings?",
    "answers": ["Oscar Peterson"],
}


def call(query: str, name: str = "wiki_search") -> str:
    return json.dumps({"name": name, "args": {"query": query}})


@pytest.fixture(scope="module")
def env(wiki_retriever) -> WikiTwoTurnEnv:
    return WikiTwoTurnEnv(retriever=wiki_retriever)


def play(env: WikiTwoTurnEnv, task: dict, turns: list[str]):
    env.reset(seed=0, options={"task": task})
    out = []
    for t in turns:
        out.append(env.step(t))
        if out[-1][2]:
            break
    return out


# ---------------------------------------------------------------- pure reward functions
@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("<reasoning>r</reasoning>\n<tool>{}</tool>", 1.0),
        ("<reasoning>r</reasoning><answer>a</answer>", 1.0),
        ("<reasoning> r </reasoning><answer>a</answer>", 0.8),  # spacing inside a tag
        ("<reasoning>r</reasoning>", 0.2 + 0.2 + 0.2),  # one of two slots, spacing, start; no valid end
        ("<answer>a</answer>", 0.2 + 0.2 + 0.2),  # one slot, spacing, end; does not start with <reasoning>
        ("plain text", 0.0),
        ("  <reasoning>r</reasoning><tool>x</tool>  ", 1.0),  # surrounding whitespace is stripped first
    ],
)
def test_format_score(text, score):
    assert R.format_score(text) == pytest.approx(score)


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("<reasoning>r</reasoning><tool>t</tool>", 1.0),
        ("<reasoning>r</reasoning><answer>a</answer><answer>b</answer>", 0.5),
        ("<reasoning>r<answer>a</answer>", 0.5),
        ("no tags", 0.0),
    ],
)
def test_tag_usage_score(text, score):
    assert R.tag_usage_score(text) == pytest.approx(score)


def test_tool_execution_and_search_answer():
    assert R.reward_tool_execution(True, "John Wayne Gacy\n...") == 0.2
    assert R.reward_tool_execution(True, "Error: Unknown tool") == 0.0
    assert R.reward_tool_execution(False, None) == 0.0
    assert R.reward_search_answer("... JOHN WAYNE GACY was ...", ["John Wayne Gacy"]) == 0.5
    assert R.reward_search_answer("nothing", ["John Wayne Gacy"]) == 0.0


# ---------------------------------------------------------------- the paper's rollouts through the env
@pytest.fixture(scope="module")
def gacy_env(tmp_path_factory) -> WikiTwoTurnEnv:
    """The bundled corpus has no article on Gacy: a two-article fixture index stands in for Table 1's Wikipedia."""
    docs = [
        Document(
            "John Wayne Gacy",
            "John Wayne Gacy",
            "John Wayne Gacy was an American serial killer who murdered "
            "at least 33 young men in Chicago and was known as the Killer Clown.",
        ),
        Document("Clown", "Clown", "A clown is a comic performer who often wears make-up and costumes."),
    ]
    return WikiTwoTurnEnv(retriever=corpus_index(docs, "gacy", root=tmp_path_factory.mktemp("idx")))


def test_table1_successful_tool_call(gacy_env):
    """Table 1: reason, search, reason, answer -> every turn-level and outcome reward."""
    env = gacy_env
    t1 = f"<reasoning>I will use wiki_search.</reasoning>\n<tool>{call('Killer Clown serial killer Chicago')}</tool>"
    (obs1, r1, term1, _, info1), (obs2, r2, term2, _, info2) = play(
        env, GACY, [t1, "<reasoning>It is Gacy.</reasoning>\n<answer>John Wayne Gacy</answer>"]
    )
    assert obs1[0]["content"].startswith("<result>\nJohn Wayne Gacy\n") and not term1
    assert info1["reward_components"] == {"tool_execution": 0.2, "search_answer": 0.5}
    assert r1 == pytest.approx(0.7)
    assert info2["reward_components"] == {
        "answer_presence": 0.5,
        "exact_match": 1.0,
        "xml_format": pytest.approx(0.2),
        "xml_tag_usage": pytest.approx(0.2),
    }
    assert term2 and obs2 == [] and r2 == pytest.approx(1.9)
    assert info2["episode_metrics"]["env/return"] == pytest.approx(2.6)
    assert info2["episode_metrics"]["env/exact_match"] == 1.0 and info2["episode_metrics"]["env/tool_success"] == 1.0


def test_table3_no_tool_and_wrong_answer_ends_at_turn_one(env):
    """Table 3: answers 'Giant' from memory: no turn-level reward, answer presence 0 ('Giant' is not an answer)."""
    text = "<reasoning>In Them! the creatures were giant ants.</reasoning>\n<answer> Giant </answer>"
    [(obs, r, term, _, info)] = play(env, THEM, [text])
    assert term and obs == []
    c = info["reward_components"]
    assert c["tool_execution"] == 0 and c["search_answer"] == 0
    assert c["answer_presence"] == 0 and c["exact_match"] == 0
    assert c["xml_format"] == pytest.approx(0.2 * 0.8)  # spacing inside <answer> costs 20%
    assert c["xml_tag_usage"] == pytest.approx(0.2)


def test_table4_missing_tool_call_then_garbled_answer(env):
    """Table 4: turn 1 only reasons (the paper's error reply), turn 2 is a tag soup that still names the answer."""
    t1 = "<reasoning>I need to identify the Canadian jazz pianist.</reasoning>"
    t2 = (
        "<answer><tool>< reasoning> From the Wikipedia search I found that Oscar Peterson won eight Grammys."
        " </reasoning><answer>Oscar Peterson<answer><result><answer>Oscar Peterson</answer>"
    )
    (obs1, r1, term1, _, info1), (_, r2, term2, _, info2) = play(env, PETERSON, [t1, t2])
    assert obs1 == [{"role": "user", "content": NO_TOOL_ERROR}] and not term1 and r1 == 0.0
    c = info2["reward_components"]
    assert c["answer_presence"] == 0.5  # the first <answer> pair contains the name
    assert c["exact_match"] == 0.0  # ... but is not exactly it
    # t1: 1 of 2 slots (0.2) + spacing 0.2 + start 0.2 = 0.6; t2: the answer slot 0.2 + spacing of that first
    # pair (it has no outer whitespace) 0.2 + ends with </answer> 0.2 = 0.6; it does not start with <reasoning>
    assert c["xml_format"] == pytest.approx(0.2 * (0.6 + 0.6) / 2)
    assert c["xml_tag_usage"] == pytest.approx(0.2 * (1.0 + 0.0) / 2)
    assert term2 and r2 == pytest.approx(sum(c.values()))


def test_scenario_tool_use_with_poor_final_answer(env):
    t1 = f"<reasoning>search</reasoning><tool>{call('opera in four acts Georges Bizet')}</tool>"
    (_, r1, _, _, info1), (_, r2, _, _, info2) = play(env, CARMEN, [t1, "I think it is Tosca."])
    assert r1 == pytest.approx(0.7)
    c = info2["reward_components"]
    assert c["answer_presence"] == c["exact_match"] == 0.0
    assert c["xml_format"] == pytest.approx(0.2 * (1.0 + 0.0) / 2)


def test_scenario_bad_tool_call_with_valid_final_answer(env):
    t1 = "<reasoning>search</reasoning><tool>{name: wiki_search, query}</tool>"
    (obs1, r1, _, _, info1), (_, r2, _, _, info2) = play(
        env, CARMEN, [t1, "<reasoning>I know it.</reasoning><answer>Carmen</answer>"]
    )
    assert obs1[0]["content"].startswith("<result>\nError: ") and r1 == 0.0
    assert info2["reward_components"]["exact_match"] == 1.0


@pytest.mark.parametrize(
    ("tool_body", "error"),
    [
        (call("Bizet", name="google"), "unknown tool 'google'"),
        ('{"name": "wiki_search", "args": {}}', "missing required argument 'query'"),
        ('{"name": "wiki_search", "args": {"query": "x", "lang": "en"}}', "unexpected argument"),
        ('{"name": "wiki_search", "args": {"query": 42}}', "must be of type string"),
        ('{"name": "wiki_search", "args": {"query": "   "}}', "query is empty"),
        (call("x" * 5000), "at most"),
    ],
)
def test_tool_errors_earn_no_turn_reward(env, tool_body, error):
    [(obs, r, term, _, info)] = play(env, CARMEN, [f"<reasoning>r</reasoning><tool>{tool_body}</tool>"])
    assert error in obs[0]["content"] and obs[0]["content"].startswith("<result>\nError: ")
    assert r == 0.0 and not term and info["reward_components"] == {"tool_execution": 0.0, "search_answer": 0.0}


# The issue-12 reproduction: v0 parsed the <tool> body tolerantly, so these calls earned 0.2 + 0.5 at turn 1.
SLOPPY_CALLS = [
    "Sure, here it is: {'name': 'wiki_search', 'args': {'query': 'opera in four acts Georges Bizet'}}",
    '```json\n{"name": "wiki_search", "args": {"query": "opera in four acts Georges Bizet"}}\n```',
    'I will call {"name": "wiki_search", "args": {"query": "opera in four acts Georges Bizet"}} now',
    "{'name': 'wiki_search', 'args': {'query': 'opera in four acts Georges Bizet'}}",
]


@pytest.mark.parametrize("body", SLOPPY_CALLS)
def test_only_a_valid_json_call_earns_tool_execution(env, body):
    [(obs, r, term, _, info)] = play(env, CARMEN, [f"<reasoning>r</reasoning>\n<tool>{body}</tool>"])
    assert obs[0]["content"].startswith("<result>\nError: invalid JSON") and "Carmen" not in obs[0]["content"]
    assert r == 0.0 and not term and info["reward_components"] == {"tool_execution": 0.0, "search_answer": 0.0}


@pytest.mark.parametrize("body", SLOPPY_CALLS)
def test_tolerant_tool_parsing_is_opt_in(wiki_retriever, body):
    tolerant = WikiTwoTurnEnv(retriever=wiki_retriever, tool_parsing="tolerant")
    [(obs, r, _, _, info)] = play(tolerant, CARMEN, [f"<reasoning>r</reasoning>\n<tool>{body}</tool>"])
    assert obs[0]["content"].startswith("<result>\nCarmen") and r == pytest.approx(0.7)


def test_whitespace_around_the_json_call_is_fine(env):
    body = f"\n  {call('opera in four acts Georges Bizet')}\n"
    [(_, r, _, _, info)] = play(env, CARMEN, [f"<reasoning>r</reasoning>\n<tool>{body}</tool>"])
    assert info["reward_components"] == {"tool_execution": 0.2, "search_answer": 0.5} and r == pytest.approx(0.7)


def test_scenario_failure_across_both_levels(env):
    out = play(env, CARMEN, ["hmm", "still no idea"])
    assert [o[1] for o in out] == [0.0, 0.0] and out[-1][2]


def test_tool_call_outranks_answer_in_turn_one_and_second_call_is_not_run(env):
    t1 = f"<reasoning>r</reasoning><tool>{call('Bizet opera')}</tool><answer>Carmen</answer>"
    t2 = f"<reasoning>again</reasoning><tool>{call('Bizet')}</tool>"
    (obs1, r1, term1, _, _), (obs2, _, term2, _, info2) = play(env, CARMEN, [t1, t2])
    assert not term1 and obs1[0]["content"].startswith("<result>\nCarmen")
    assert term2 and obs2 == [] and info2["reward_components"]["answer_presence"] == 0.0


def test_oversized_turn_is_an_error_not_an_exception(wiki_retriever):
    e = WikiTwoTurnEnv(retriever=wiki_retriever, max_action_chars=100)
    [(obs, r, term, _, _)] = play(e, CARMEN, ["<reasoning>" + "x" * 500 + "</reasoning>"])
    assert "at most 100" in obs[0]["content"] and r == 0.0 and not term


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.text(max_size=400),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
        st.builds(lambda s: f"<tool>{s}</tool>", st.text(max_size=100)),
        st.builds(lambda s: f"<reasoning>{s}<answer>{s}</answer>", st.text(max_size=50)),
        st.just("<tool><tool>{}</tool></tool>"),
        st.just('<tool>{"name": "wiki_search", "args": {"query": "x"}, "extra": 1}</tool>'),
        st.just("x" * 1_000_000),
    ),
    st.text(max_size=200),
)
def test_fuzz_step_never_raises(env, first, second):
    env.reset(seed=1)
    for text in (first, second):
        obs, reward, terminated, truncated, info = env.step(text)
        assert env.observation_space.contains(obs) and np.isfinite(reward) and not truncated
        assert 0.0 <= reward <= 1.9 + 1e-9
        if terminated:
            break
    assert terminated


# ---------------------------------------------------------------- scripted policies, seeding, arguments
def test_reference_policy_answers_whenever_its_search_finds_the_answer_and_direct_policy_does_not_search(env):
    ref, direct = get_scripted_policy(env, "reference"), get_scripted_policy(env, "direct")
    ref_logs = [run_episode(env, ref, seed=s) for s in range(40)]
    found = [log.rewards[0] == pytest.approx(0.7) for log in ref_logs]  # tool 0.2 + search answer 0.5
    assert all(log.rewards[0] in (pytest.approx(0.2), pytest.approx(0.7)) for log in ref_logs)
    assert [log.metrics["env/exact_match"] for log in ref_logs] == [float(f) for f in found]
    assert 0.4 <= np.mean(found) <= 0.9  # facts-v1: a verbatim search finds the answer ~70% of the time
    title_em = np.mean([run_episode(env, get_scripted_policy(env, "title"), seed=s).metrics["env/exact_match"]
                        for s in range(40)])  # fmt: skip
    assert title_em <= 0.1  # copying the first hit's title no longer solves the task
    direct_logs = [run_episode(env, direct, seed=s) for s in range(10)]
    assert all(len(log.rewards) == 1 and log.metrics["env/tool_called"] == 0 for log in direct_logs)


def test_v0_question_set_is_solved_by_copying_the_title(wiki_retriever):
    env = gym.make("TurnRL/WikiTwoTurn-v2", question_set="lead-v0", retriever=wiki_retriever).unwrapped
    logs = [run_episode(env, get_scripted_policy(env, "title"), seed=s) for s in range(10)]
    assert all(log.rewards[0] == pytest.approx(0.7) for log in logs)
    assert np.mean([log.metrics["env/exact_match"] for log in logs]) >= 0.9
    with pytest.raises(InvalidArgument, match="question_set"):
        gym.make("TurnRL/WikiTwoTurn-v2", question_set="lead-v9", retriever=wiki_retriever)


def test_seeded_tasks_are_deterministic_and_varied(env):
    tasks = []
    for seed in (0, 0, 1):
        env.reset(seed=seed)
        tasks.append(env.task["id"])
    assert tasks[0] == tasks[1] != tasks[2]


def test_bad_make_arguments():
    with pytest.raises(InvalidArgument, match="dataset='wikipedia'"):
        gym.make("TurnRL/WikiTwoTurn-v2", dataset="wikipedia")
    with pytest.raises(InvalidArgument, match="split='dev'"):
        gym.make("TurnRL/WikiTwoTurn-v2", split="dev")
    with pytest.raises(InvalidArgument, match="top_k=0"):
        gym.make("TurnRL/WikiTwoTurn-v2", top_k=0)
    with pytest.raises(InvalidArgument, match="tool_parsing='lenient'"):
        gym.make("TurnRL/WikiTwoTurn-v2", tool_parsing="lenient")
    with pytest.raises(InvalidTask, match="answers"):
        gym.make("TurnRL/WikiTwoTurn-v2", tasks=[{"question": "q?"}])


def test_custom_tasks_and_top_k(wiki_retriever):
    e = WikiTwoTurnEnv(retriever=wiki_retriever, tasks=[CARMEN], top_k=2)
    e.reset(seed=5)
    assert e.task["question"] == CARMEN["question"]
    obs, *_ = e.step(f"<reasoning>r</reasoning><tool>{call('Bizet opera Carmen')}</tool>")
    assert obs[0]["content"].count("\n\n") >= 1


# ------------------------------------------------------------------------- format rewards against the paper (000)
_CALL = '{"name": "wiki_search", "args": {"query": "Bizet"}}'


@pytest.mark.parametrize(
    ("turn", "fmt", "usage"),
    [
        # two calls in one turn: every format criterion holds; <tool> is opened and closed twice, so 1 of 2 tags
        (f"<reasoning>r</reasoning>\n<tool>{_CALL}</tool>\n<tool>{_CALL}</tool>", 1.0, 0.5),
        (f"<reasoning>r</reasoning><tool>{_CALL}</tool><tool>{_CALL}</tool><tool>{_CALL}</tool>", 1.0, 0.5),
        ("<reasoning>r</reasoning>\n<answer>Carmen", 0.6, 0.5),  # unclosed answer: a field missing, no end tag
        ("<reasoning> r </reasoning>\n<answer>Carmen</answer>", 0.8, 1.0),  # whitespace inside a tag
        ("Carmen", 0.0, 0.0),  # no tags
        (f"<reasoning>r</reasoning><tool>{_CALL}</tool><answer>Carmen</answer>", 1.0, 1.0),  # tool and answer slot
    ],
)
def test_format_and_tag_usage_pay_the_papers_definitions(turn, fmt, usage):
    """000 §3.2: "XML Format Reward: ... Checks include: (1) the presence of at least one expected field
    (<reasoning>, <tool>, <answer>), (2) correct spacing (no leading or trailing whitespace within tags), (3) message
    starting with <reasoning>, and (4) message ending with </tool> or </answer>. ... (weighted: 40% field presence,
    20% spacing, 20% correct starting tag, 20% correct ending tag)"; "XML Tag Usage Reward: ... For each tag, the
    reward verifies that exactly one opening and one closing tag are present. The reward is the proportion of
    correctly used tags (normalized by the number of tags checked)". A duplicated call breaks no format criterion and
    is paid less by tag usage only (the paper's code, verifiers' XMLParser, scores 1 - |count - 1| per opening and
    closing tag, which goes negative from three copies; the paper's text says a proportion, which we pay)."""
    assert R.format_score(turn) == pytest.approx(fmt)
    assert R.tag_usage_score(turn) == pytest.approx(usage)
    assert R.reward_xml_format([turn, "<reasoning>r</reasoning>\n<answer>Carmen</answer>"]) == pytest.approx(
        0.2 * (fmt + 1.0) / 2
    )


# ------------------------------------------------------------------------- the explore cold start
def test_explore_policy_varies_its_first_query_and_every_turn_is_well_formed(env):
    from envs.wiki_two_turn.env import parse_turn
    from envs.wiki_two_turn.questions import wiki_questions

    policy = get_scripted_policy(env, "explore")
    queries, found = set(), set()
    for task in wiki_questions("train")[:3]:
        for seed in range(6):
            env.reset(seed=seed, options={"task": task})
            rng = np.random.default_rng(seed)
            first = policy(env, rng)
            kind, parsed = parse_turn(first)
            assert kind == "tool" and parsed.name == "wiki_search", first
            queries.add((task["id"], parsed.args["query"]))
            _, _, term, _, info = env.step(first)
            found.add(info["reward_components"]["search_answer"])
            assert not term
            second = policy(env, rng)
            assert parse_turn(second)[0] == "answer"
            assert env.step(second)[2]
    assert len(queries) >= 3 * 3  # at least 3 distinct queries per question over 6 draws
    assert found == {0.0, 0.5}  # some queries find the answer's article, some do not
