"""Every id ever published makes: older ids keep their behaviour through kwargs, warn with what changed, and carry
their held-out tasks; the leaderboards accept them."""

from __future__ import annotations

import doctest
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest

import agentgym_turn
from agentgym_turn import ENV_SPECS, registration
from agentgym_turn.error import InvalidArgument
from agentgym_turn.policies import get_scripted_policy
from agentgym_turn.registration import deprecation_message, held_out_kwargs, versions
from leaderboards.families import FAMILIES, family_for

ALL_IDS = sorted(ENV_SPECS)
OLD_IDS = [i for i in ALL_IDS if ENV_SPECS[i].outdated]
#: kwargs that keep a make cheap without touching what a version changes (espeak instead of the piper voice)
CHEAP = {"TauRetailSpeech": {"voice": "espeak"}, "TauAirlineSpeech": {"voice": "espeak"}}
#: the most informative scripted policy of each env class (several rewarded turns)
POLICY = ("reference", "oracle", "bfs")


def _name(env_id: str) -> str:
    return env_id.split("/")[1].rsplit("-v", 1)[0]


def make(env_id: str, **kwargs) -> tuple[gym.Env, list[str]]:
    """``gym.make(env_id, **kwargs)`` and the messages of the warnings TurnRL emitted while making it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id, **kwargs)
    return env, [str(w.message) for w in caught if str(w.message).startswith("TurnRL/")]


def fresh_process(*lines: str) -> list[str]:
    """Run ``lines`` of Python in a new interpreter (nothing imported or registered yet); its stdout lines."""
    out = subprocess.run([sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def first_turn(env: gym.Env, **options) -> None:
    env.reset(seed=0, options=options or None)


# ---------------------------------------------------------------------------------------------------- every id
def test_every_env_has_all_its_versions_and_v0_ids_exist():
    assert set(OLD_IDS) == {
        "TurnRL/WikiTwoTurn-v0",
        "TurnRL/WikiTwoTurn-v1",
        "TurnRL/SearchR1-v0",
        "TurnRL/SearchR1-v1",
        "TurnRL/Sokoban-v0",
        "TurnRL/Sokoban-v1",
        "TurnRL/TauRetail-v0",
        "TurnRL/TauAirline-v0",
        "TurnRL/TauRetailSpeech-v0",
        "TurnRL/TauAirlineSpeech-v0",
        "TurnRL/TauRetail-v1",
        "TurnRL/TauAirline-v1",
        "TurnRL/TauRetailSpeech-v1",
        "TurnRL/TauAirlineSpeech-v1",
    }
    for env_id in ALL_IDS:
        newest = versions(env_id)[0]
        assert bool(ENV_SPECS[env_id].outdated) == (env_id != newest)
        assert ENV_SPECS[env_id].entry_point == ENV_SPECS[newest].entry_point  # one env class per env, kwargs differ
        assert gym.spec(env_id).kwargs == dict(ENV_SPECS[env_id].kwargs)
        gym.spec(env_id).to_json()  # string entry points: the spec serialises


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_every_id_makes_resets_and_plays_a_scripted_turn(env_id):
    env, ours = make(env_id, **CHEAP.get(_name(env_id), {}))
    if ENV_SPECS[env_id].outdated:
        assert ours == [deprecation_message(env_id)]
    else:
        assert ours == []
    newest = versions(env_id)[0]
    assert type(env.unwrapped).__name__ == ENV_SPECS[newest].entry_point.rpartition(":")[2]
    env.reset(seed=0)
    policies = type(env.unwrapped).scripted_policies
    policy = get_scripted_policy(env, next((p for p in POLICY if p in policies), sorted(policies)[0]))
    _, reward, _, truncated, info = env.step(policy(env.unwrapped, env.unwrapped.np_random))
    assert isinstance(reward, float) and truncated is False
    assert set(info["reward_components"]) <= set(env.unwrapped.reward_levels)
    env.close()


@pytest.mark.parametrize("env_id", OLD_IDS)
def test_an_old_id_warns_with_the_newer_id_what_changed_and_its_kwargs(env_id):
    message = deprecation_message(env_id)
    newest = versions(env_id)[0]
    next_version = int(env_id.rsplit("-v", 1)[1]) + 1  # the message starts with what the next version changed
    assert message.startswith(f"{env_id} is out of date: v{next_version}") and f"use {newest}" in message
    for key, value in ENV_SPECS[env_id].kwargs.items():
        if ENV_SPECS[newest].kwargs.get(key) != value:
            assert f"{key}={value!r}" in message  # how to get the same env under the newer id
    with pytest.raises(ValueError, match="current id"):
        deprecation_message(newest)


def test_the_warning_comes_from_the_spec_too_and_is_a_deprecation_warning():
    env, _ = make("TurnRL/Sokoban-v0")
    with pytest.warns(DeprecationWarning, match=r"TurnRL/Sokoban-v0 is out of date: v1's env/effective_action_rate"):
        again = gym.make(env.spec)  # what vector envs do in their workers
    assert again.spec.id == "TurnRL/Sokoban-v0" and again.unwrapped.effective_actions == "state-change"


def test_module_prefixed_old_id_makes_and_warns_in_a_fresh_process():
    lines = fresh_process(
        "import warnings",
        "import gymnasium as gym",
        "with warnings.catch_warnings(record=True) as caught:",
        "    warnings.simplefilter('always')",
        "    env = gym.make('agentgym_turn:TurnRL/Sokoban-v0')",
        "print(type(env.unwrapped).__name__, env.unwrapped.effective_actions)",
        "print(*[w.category.__name__ + ': ' + str(w.message) for w in caught], sep='\\n')",
    )
    assert lines[0] == "SokobanEnv state-change"
    assert f"DeprecationWarning: {deprecation_message('TurnRL/Sokoban-v0')}" in lines


def test_the_registry_example_runs_as_written():
    result = doctest.testmod(registration, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_unknown_ids_still_fail_with_gymnasiums_hint():
    with pytest.raises(gym.error.VersionNotFound, match="v1"):
        gym.make("TurnRL/Sokoban-v3")
    with pytest.raises(InvalidArgument, match="not a TurnRL id"):
        versions("TurnRL/Nope-v0")


# ---------------------------------------------------------------------------------------------------- v0 vs v1
def test_wiki_two_turn_v0_pays_a_python_literal_call_and_asks_lead_v0_questions():
    from envs.wiki_two_turn.questions import LEAD_SET, wiki_questions

    task = {"question": "What is an opera in four acts by Georges Bizet?", "answers": ["Carmen"]}
    call = "<reasoning>r</reasoning><tool>{'name': 'wiki_search', 'args': {'query': 'opera Georges Bizet'}}</tool>"
    paid = {}
    for env_id in ("TurnRL/WikiTwoTurn-v0", "TurnRL/WikiTwoTurn-v1"):
        env, _ = make(env_id)
        first_turn(env, task=task)
        paid[env_id] = env.step(call)[-1]["reward_components"]["tool_execution"]
    assert paid == {"TurnRL/WikiTwoTurn-v0": 0.2, "TurnRL/WikiTwoTurn-v1": 0.0}
    env, _ = make("TurnRL/WikiTwoTurn-v0", split="validation")
    lead = wiki_questions("validation", question_set=LEAD_SET)
    assert [t["id"] for t in env.unwrapped.tasks] == [t["id"] for t in lead]


def test_wiki_two_turn_v1_keeps_its_held_out_questions_and_v2_cleans_them():
    from envs.wiki_two_turn.questions import CLEAN_SET, FACTS_SET, wiki_questions

    ids = {}
    for env_id in ("TurnRL/WikiTwoTurn-v1", "TurnRL/WikiTwoTurn-v2"):
        env, _ = make(env_id, split="validation")
        ids[env_id] = [t["id"] for t in env.unwrapped.tasks]
    assert ids["TurnRL/WikiTwoTurn-v1"] == [t["id"] for t in wiki_questions("validation", question_set=FACTS_SET)]
    assert ids["TurnRL/WikiTwoTurn-v2"] == [t["id"] for t in wiki_questions("validation", question_set=CLEAN_SET)]
    assert len(ids["TurnRL/WikiTwoTurn-v1"]) == 671 and len(ids["TurnRL/WikiTwoTurn-v2"]) == 251
    train = {t["id"] for v in ("v1", "v2") for t in make(f"TurnRL/WikiTwoTurn-{v}")[0].unwrapped.tasks}
    assert len(train) == len(wiki_questions("train", question_set=FACTS_SET))  # the same training questions


class BrokenJudge:
    """A chat model whose replies never hold a score, so every judge call fails."""

    name = "broken"

    def complete(self, messages, *, max_tokens=512, temperature=0.0, seed=None) -> str:
        return "no score here"


def test_search_r1_v0_matches_substrings_of_the_information_block_and_leaves_a_failed_judge_out():
    task = {"question": "Is it?", "answers": ["no"]}  # "no" is in "No passages found." of an empty search
    retrieval, judged = {}, {}
    for env_id in ("TurnRL/SearchR1-v0", "TurnRL/SearchR1-v2"):
        env, _ = make(env_id, tasks=[task])
        first_turn(env)
        retrieval[env_id] = env.step("<think>t</think><search></search>")[-1]["reward_components"]["retrieval"]
        env, _ = make(env_id, tasks=[task], reward_mode="judge", judge=BrokenJudge(), judge_retries=0)
        first_turn(env)
        info = env.step("<think>t</think><search>Casablanca</search>")[-1]
        assert info["judge_failed"]
        judged[env_id] = info["reward_components"]
    assert retrieval == {"TurnRL/SearchR1-v0": 0.3, "TurnRL/SearchR1-v2": 0.0}
    assert judged == {"TurnRL/SearchR1-v0": {}, "TurnRL/SearchR1-v2": {"judge_turn": -1.0}}
    assert make("TurnRL/SearchR1-v0", tasks=[task])[0].unwrapped.max_information_tokens is None


def test_search_r1_v1_keeps_its_held_out_questions_and_v2_makes_them_disjoint_from_train():
    from envs.search_r1.data import normalized_answers, normalized_question, wiki_search_questions

    tasks = {}
    for env_id in ("TurnRL/SearchR1-v1", "TurnRL/SearchR1-v2"):
        env, _ = make(env_id, **registration.held_out_kwargs(env_id))
        tasks[env_id] = env.unwrapped.tasks
    retriever = env.unwrapped.retriever
    v1 = wiki_search_questions(retriever, "test", question_set="facts-v1")
    assert [t["id"] for t in tasks["TurnRL/SearchR1-v1"]] == [t["id"] for t in v1]
    assert (len(tasks["TurnRL/SearchR1-v1"]), len(tasks["TurnRL/SearchR1-v2"])) == (504, 224)
    train = make("TurnRL/SearchR1-v2")[0].unwrapped.tasks
    assert len(train) == len(wiki_search_questions(retriever, "train", question_set="facts-v1"))  # train unchanged
    seen_answers = set().union(*(normalized_answers(t) for t in train))
    held_out = tasks["TurnRL/SearchR1-v2"]
    assert not any(normalized_answers(t) & seen_answers for t in held_out)
    assert len({normalized_question(t) for t in held_out}) == len(held_out)


def test_sokoban_v0_counts_every_state_change_as_effective():
    room = {"id": "detour", "room": ["#######", "#_PX_O#", "#######"]}
    rates = {}
    for env_id in ("TurnRL/Sokoban-v0", "TurnRL/Sokoban-v1"):
        env, _ = make(env_id)
        first_turn(env, task=room)
        env.step("<think>detour</think><answer>Left || Right || Right</answer>")
        episode = env.step("<think>push</think><answer>Right</answer>")[-1]["episode_metrics"]
        rates[env_id] = (episode["env/effective_action_rate"], episode["env/effective_actions"])
    assert rates == {"TurnRL/Sokoban-v0": (1.0, 4.0), "TurnRL/Sokoban-v1": (0.5, 2.0)}


def test_sokoban_v1_draws_6x6_rooms_by_seed_alone_and_v2_keeps_held_out_layouts_apart():
    from envs.sokoban.rooms import layout_split

    tasks = {}
    for env_id in ("TurnRL/Sokoban-v0", "TurnRL/Sokoban-v1", "TurnRL/Sokoban-v2"):
        for split in ("train", "test"):
            env, _ = make(env_id, split=split)
            env.reset(seed=0)
            tasks[env_id, split] = env.unwrapped.task
    v1_room = ["######", "#___O#", "#PX__#", "##__##", "######", "######"]  # seed 0's room since v0
    for env_id in ("TurnRL/Sokoban-v0", "TurnRL/Sokoban-v1"):
        assert tasks[env_id, "train"]["room"] == tasks[env_id, "test"]["room"] == v1_room
    assert len(tasks["TurnRL/Sokoban-v2", "train"]["room"]) == 7
    assert [layout_split(tasks["TurnRL/Sokoban-v2", s]["layout_key"]) for s in ("train", "test")] == ["train", "test"]
    assert {held_out_kwargs(i)["split"] for i in versions("TurnRL/Sokoban-v2")} == {"test"}


@pytest.mark.parametrize("name", ["TauRetail", "TauAirline"])
def test_tau_v0_customer_recites_its_scenario_and_confirms_anything(name):
    opening, confirm = {}, {}
    for version in ("v0", "v1"):
        env, _ = make(f"TurnRL/{name}-{version}")
        env.reset(seed=0, options={"task": {"id": "0"}})
        opening[version] = env.unwrapped.history[1]["content"]
        messages = env.step("Shall I cancel reservation ABC123 and order #W0000000 for you?")[0]
        confirm[version] = messages[0]["content"]
    scenario = env.unwrapped.task["user_scenario"]["instructions"]["reason_for_call"].strip()
    assert scenario in opening["v0"] and scenario not in opening["v1"]
    assert confirm["v0"] == "Yes, please go ahead." and not confirm["v1"].startswith("Yes")


@pytest.mark.parametrize("name", ["TauRetail", "TauAirline", "TauRetailSpeech", "TauAirlineSpeech"])
def test_tau_v0_and_v1_pose_their_held_out_tasks_and_v2_trains_apart_from_them(name):
    from envs.tau.data import held_out_overlaps, load_domain
    from envs.tau.verifier import write_tool_names

    domain = "airline" if "Airline" in name else "retail"
    data = load_domain(domain)
    train, test = set(data.splits["train"]), set(data.splits["test"])
    tasks = {}
    for version in ("v0", "v1", "v2"):
        env, _ = make(f"TurnRL/{name}-{version}", **CHEAP.get(name, {}))
        tasks[version] = {t["id"] for t in env.unwrapped._tasks}
        assert held_out_kwargs(f"TurnRL/{name}-{version}")["split"] == "test"
    assert tasks["v0"] == tasks["v1"] == test  # the old default: the held-out tasks themselves
    assert tasks["v2"] == train - set(held_out_overlaps(data, write_tool_names(domain))) and not tasks["v2"] & test
    env, _ = make(f"TurnRL/{name}-v1", split="train", **CHEAP.get(name, {}))
    assert {t["id"] for t in env.unwrapped._tasks} == train  # an old id asked for train gets all of it, as before


def test_speech_v0_speaks_v0s_customer():
    texts = {}
    for version in ("v0", "v1"):
        env, _ = make(f"TurnRL/TauRetailSpeech-{version}", voice="espeak")
        env.reset(seed=0, options={"task": {"id": "0"}})
        texts[version] = env.unwrapped.spoken_turns[0].text
    scenario = env.unwrapped.task["user_scenario"]["instructions"]["reason_for_call"].strip()
    assert scenario in texts["v0"] and scenario not in texts["v1"]


# ---------------------------------------------------------------------------------------------------- held out
def test_held_out_lives_in_the_registry_for_every_id_and_the_families_read_it():
    for env_id in ALL_IDS:
        family = family_for(env_id)  # an older id has its env's leaderboard
        assert env_id in family.env_ids and held_out_kwargs(env_id) == dict(family.env_kwargs)
        assert held_out_kwargs(env_id) == held_out_kwargs(versions(env_id)[0])
        assert held_out_kwargs(f"agentgym_turn:{env_id}") == held_out_kwargs(env_id)
    assert held_out_kwargs("TurnRL/WikiTwoTurn-v0") == {"split": "validation"}
    with pytest.raises(InvalidArgument, match="not a TurnRL id"):
        held_out_kwargs("TurnRL/Nope-v0")
    held = held_out_kwargs("TurnRL/TauRetail-v2")
    held["split"] = "train"  # a copy: the registry is not changed through it
    assert held_out_kwargs("TurnRL/TauRetail-v2")["split"] == "test"


def test_trainers_evaluation_reads_the_registry_without_importing_leaderboards():
    lines = fresh_process(
        "import sys",
        "from trainers.evaluation import held_out_kwargs",
        "print(held_out_kwargs('TurnRL/SearchR1-v0', {'top_k': 2}))",
        "print(any(m == 'leaderboards' or m.startswith('leaderboards.') for m in sys.modules))",
    )
    assert lines == ["{'dataset': 'wiki', 'split': 'test', 'top_k': 2}", "False"]


def test_leaderboard_tables_are_one_per_env_and_old_rows_keep_their_group():
    for family in FAMILIES.values():
        assert family.table_ids == tuple(i for i in family.env_ids if not ENV_SPECS[i].outdated)
    speech = FAMILIES["speech"]
    assert speech.group_value("eval mode", "TurnRL/TauAirlineSpeech-v0", {}) == "speech"
    assert speech.group_value("eval mode", "TurnRL/TauRetail-v0", {}) == "text"
    assert agentgym_turn.held_out_kwargs is held_out_kwargs
