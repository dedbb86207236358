"""Rollouts: token-in-token-out sequences, the chat-template delta and its prefix invariant, masks, groups, trees."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

from agentgym_turn.error import InvalidArgument
from tests.trainers import toy_env
from trainers.engine_transformers import TransformersEngine
from trainers.engines import stop_token_ids
from trainers.rollout import (
    EnvPool,
    PrefixInvariantError,
    RolloutConfig,
    collect,
    decode,
    engine_actor,
    epoch_tasks,
    render,
    scripted_actor,
    turn_delta,
)

ENV = toy_env.ENV_ID


def _scripted(tokenizer, names=("reference",), weights=None):
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return scripted_actor(tokenizer, stop, list(names), weights)


def test_scripted_episode_is_the_template_rendering_with_exact_masks(tokenizer):
    cfg = RolloutConfig(max_new_tokens=64, max_context=1024)
    pool = EnvPool([ENV])
    episodes, stats = collect(
        pool, _scripted(tokenizer), tokenizer, stop_token_ids(tokenizer), cfg, num_tasks=2, group_size=2, seed=0
    )
    assert len(episodes) == 4 and stats.episodes == 4
    for ep in episodes:
        env = pool.get(ENV, 4)[0].unwrapped
        a, b = (int(x) for x in re.search(r"What is (\d+) \+ (\d+)\?", decode(tokenizer, ep.token_ids)).groups())
        history = [
            *env._begin({"a": a, "b": b}),
            {"role": "assistant", "content": f"<tool>{a}+{b}</tool>"},
            {"role": "user", "content": f"<result>{a + b}</result>"},
            {"role": "assistant", "content": f"<answer>{a + b}</answer>"},
        ]
        text = render(tokenizer, history, generation_prompt=False)
        assert text.startswith(decode(tokenizer, ep.token_ids))  # only the final "\n" is not part of the episode
        assert text[len(decode(tokenizer, ep.token_ids)) :] == "\n"
        policy = [decode(tokenizer, ep.token_ids[ep.turn_index == k]) for k in range(2)]
        assert policy == [f"<tool>{a}+{b}</tool><|im_end|>", f"<answer>{a + b}</answer><|im_end|>"]
        brevity = [-len(f"<tool>{a}+{b}</tool>") / 100, -len(f"<answer>{a + b}</answer>") / 100]
        assert ep.turn_rewards == [{"tool": 0.2, "brevity": brevity[0]}, {"exact_match": 1.0, "brevity": brevity[1]}]
        assert ep.reward_levels == {"tool": "turn", "brevity": "turn", "exact_match": "outcome"}
        assert ep.terminated and not ep.truncated and ep.node_ids is None
        assert ep.state_keys is None  # the toy env reports no info["state_key"]
        assert np.array_equal(ep.loss_mask == 1, ep.turn_index >= 0)
        env_tokens = decode(tokenizer, ep.token_ids[(ep.loss_mask == 0) & (np.arange(len(ep.token_ids)) > 40)])
        assert "<result>" in env_tokens and "<|im_start|>assistant\n" in env_tokens


def test_group_shares_the_task_and_groups_differ(tokenizer):
    cfg = RolloutConfig(max_new_tokens=64, max_context=1024)
    episodes, _ = collect(
        EnvPool([ENV]),
        _scripted(tokenizer),
        tokenizer,
        stop_token_ids(tokenizer),
        cfg,
        num_tasks=3,
        group_size=3,
        seed=1,
        group_offset=10,
    )
    prompts = {}
    for ep in episodes:
        prompt = decode(tokenizer, ep.token_ids[: np.flatnonzero(ep.loss_mask)[0]])
        prompts.setdefault(ep.group, set()).add(prompt)
    assert sorted(prompts) == [10, 11, 12] and all(len(p) == 1 for p in prompts.values())
    assert len(set.union(*prompts.values())) == 3


def test_tree_rollouts_fork_and_name_shared_nodes(tokenizer):
    cfg = RolloutConfig(max_new_tokens=64, max_context=1024)
    actor = _scripted(tokenizer, ("reference", "direct"), [0.5, 0.5])
    episodes, _ = collect(
        EnvPool([ENV]),
        actor,
        tokenizer,
        stop_token_ids(tokenizer),
        cfg,
        num_tasks=1,
        group_size=3,
        seed=2,
        tree=True,
        branch_turns=1,
    )
    assert len(episodes) == 3
    assert [ep.node_ids[0] for ep in episodes] == ["0:0", "0:1", "0:2"]
    for ep in episodes:
        assert len(ep.node_ids) == ep.num_turns
        if ep.num_turns == 2:
            assert ep.node_ids[1] == ep.node_ids[0] + ".0"
    deep, _ = collect(
        EnvPool([ENV]),
        _scripted(tokenizer),
        tokenizer,
        stop_token_ids(tokenizer),
        cfg,
        num_tasks=1,
        group_size=2,
        seed=2,
        tree=True,
        branch_turns=2,
    )
    assert sorted(ep.node_ids[1] for ep in deep) == ["0:0.0", "0:0.1", "0:1.0", "0:1.1"]
    prefix = {ep.node_ids[0]: ep.token_ids[: ep.last_token_of_turn(0) + 1].tobytes() for ep in deep}
    for ep in deep:
        assert ep.token_ids[: ep.last_token_of_turn(0) + 1].tobytes() == prefix[ep.node_ids[0]]


def test_engine_rollout_cut_turn_gets_end_of_turn_and_context_limit(tokenizer, tiny_model):
    engine = TransformersEngine(tiny_model, stop_token_ids(tokenizer), pad_token_id=tokenizer.pad_token_id)
    cfg = RolloutConfig(max_new_tokens=8, max_context=1024, temperature=1.0)
    actor = engine_actor(engine, cfg, seed=0)
    episodes, stats = collect(
        EnvPool([ENV]), actor, tokenizer, stop_token_ids(tokenizer), cfg, num_tasks=2, group_size=2, seed=3
    )
    assert stats.policy_tokens == sum(int(e.loss_mask.sum()) for e in episodes) > 0
    for ep in episodes:
        first = ep.token_ids[ep.turn_index == 0]
        assert 1 <= len(first) <= 8
        assert np.all(ep.logprobs[ep.loss_mask == 1] <= 0) and np.all(ep.logprobs[ep.loss_mask == 0] == 0)
        if ep.num_turns == 2 and first[-1] not in stop_token_ids(tokenizer):
            after = ep.token_ids[ep.last_token_of_turn(0) + 1 : ep.last_token_of_turn(0) + 3]
            assert decode(tokenizer, after).startswith("<|im_end|>")
    tight = RolloutConfig(max_new_tokens=8, max_context=70)
    cut, _ = collect(
        EnvPool([ENV]),
        engine_actor(engine, tight, seed=0),
        tokenizer,
        stop_token_ids(tokenizer),
        tight,
        num_tasks=1,
        group_size=2,
        seed=3,
    )
    assert all(len(ep.token_ids) <= 70 for ep in cut)


def test_a_template_that_rewrites_history_is_rejected(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}<|im_start|>assistant\n"
        "[hidden]<|im_end|>\n{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    with pytest.raises(PrefixInvariantError, match="prefix invariant"):
        turn_delta(tok, history, [{"role": "user", "content": "r"}], stop_text="<|im_end|>")
    delta = turn_delta(tokenizer, history, [{"role": "user", "content": "r"}], stop_text="<|im_end|>")
    assert decode(tokenizer, delta) == "\n<|im_start|>user\nr<|im_end|>\n<|im_start|>assistant\n"
    cut = turn_delta(tokenizer, history, [{"role": "user", "content": "r"}], stop_text=None)
    assert decode(tokenizer, cut) == "<|im_end|>" + decode(tokenizer, delta)


def test_env_pool_validates_weights():
    with pytest.raises(ValueError, match="weights"):
        EnvPool([ENV, ENV], weights=[1.0])


def test_prefix_invariant_on_real_wiki_two_turn_episodes(tokenizer):
    """SmolLM2's ChatML template on real WikiTwoTurn episodes: every turn's ids decode to the template's text."""
    wiki = "TurnRL/WikiTwoTurn-v2"
    cfg = RolloutConfig(max_new_tokens=256, max_context=4096, check_prefix=True)
    pool = EnvPool([wiki])
    actor = _scripted(tokenizer, ("reference", "direct"), [0.5, 0.5])
    episodes, _ = collect(pool, actor, tokenizer, stop_token_ids(tokenizer), cfg, num_tasks=3, group_size=2, seed=4)
    assert {ep.num_turns for ep in episodes} == {1, 2}
    for ep in episodes:
        text = decode(tokenizer, ep.token_ids)
        assert text.startswith("<|im_start|>system\n") and text.endswith("</answer><|im_end|>")
        if ep.num_turns == 2:
            env_part = decode(
                tokenizer, ep.token_ids[ep.last_token_of_turn(0) + 1 : np.flatnonzero(ep.turn_index == 1)[0]]
            )
            assert env_part.startswith("\n<|im_start|>user\n<result>") and env_part.endswith("<|im_start|>assistant\n")
            assert ep.turn_rewards[0]["tool_execution"] == 0.2
    # anchor-state keys: turn k's key is the state it acted in; a group's episodes all start from one state
    for group in {ep.group for ep in episodes}:
        members = [ep for ep in episodes if ep.group == group]
        assert len({ep.state_keys[0] for ep in members}) == 1 and members[0].state_keys[0].startswith("t0:")
    env = pool.get(wiki, 1)[0]
    _, info = env.reset(seed=0)
    first = info["state_key"]
    _, _, _, _, info = env.step('<reasoning>r</reasoning><tool>{"name": "wiki_search", "args": {"query": "x"}}</tool>')
    assert first.startswith("t0:") and info["state_key"].startswith("t1:")
    for ep in episodes:
        assert len(ep.state_keys) == ep.num_turns and all(k.startswith(f"t{i}:") for i, k in enumerate(ep.state_keys))
    pool.close()


# ---------------------------------------------------------------------------------------------------- task order
def _map_pool():
    return EnvPool(["TurnRL/CreditChain-v0"], make_kwargs={"pairs": "Map"})


def _ids(tasks):
    return [task["id"] for _, task in tasks]


def test_epoch_order_visits_every_task_once_per_epoch_and_resumes_from_the_position():
    pool = _map_pool()
    listed = [t["id"] for t in pool.get("TurnRL/CreditChain-v0", 1)[0].unwrapped.task_list()]
    assert len(listed) == len(set(listed)) == 36
    order = _ids(epoch_tasks(pool, seed=3, start=0, n=90))  # two and a half epochs
    assert sorted(order[:36]) == sorted(order[36:72]) == sorted(listed)  # each epoch is every task once
    assert order[:36] != order[36:72] and order[:36] != listed  # reshuffled each epoch, not the list's order
    assert len(set(order[72:])) == 18  # a partial epoch repeats nothing either
    steps = [_ids(epoch_tasks(pool, 3, step * 9, 9)) for step in range(10)]  # a run of 9 tasks a step
    assert [i for s in steps for i in s] == order  # a step's slice depends on its position alone: resumable
    assert _ids(epoch_tasks(pool, 4, 0, 36)) != order[:36]  # the seed decides the shuffle
    # the right pick of the Map pair is boat on half the tasks: an epoch of 36 poses exactly 18 of each
    answers = [task["answer"] for _, task in epoch_tasks(pool, 3, 0, 36)]
    assert answers.count("boat") == answers.count("car") == 18
    pool.close()


def test_epoch_order_concatenates_several_envs_and_refuses_generated_tasks():
    pool = EnvPool(["TurnRL/CreditChain-v0", "TurnRL/CreditChain-v0"], make_kwargs={"pairs": "Map"})
    assert len(set(_ids(epoch_tasks(pool, 0, 0, 72)))) == 36  # each env's 36, twice per epoch
    pool.close()
    generated = EnvPool([ENV])  # the toy env draws a + b: no finite list
    with pytest.raises(InvalidArgument, match=r"generates its tasks.*--task-order iid"):
        epoch_tasks(generated, 0, 0, 4)
    generated.close()


def test_collect_poses_the_given_tasks_in_order(tokenizer):
    pool = _map_pool()
    posed = epoch_tasks(pool, seed=0, start=0, n=3)
    cfg = RolloutConfig(max_new_tokens=32, max_context=512, max_turns=4)
    episodes, _ = collect(pool, _scripted(tokenizer, ("random_choice",)), tokenizer, stop_token_ids(tokenizer), cfg,
                          num_tasks=3, group_size=2, seed=5, tasks=posed)  # fmt: skip
    assert [ep.group for ep in episodes] == [0, 0, 1, 1, 2, 2]
    for ep in episodes:
        cue = posed[ep.group][1]["cue"]
        options = " or ".join(posed[ep.group][1]["options"])
        assert f"Map: {cue}. Take {options}?" in decode(tokenizer, ep.token_ids)
    with pytest.raises(InvalidArgument, match="got 3 tasks for num_tasks=2"):
        collect(pool, _scripted(tokenizer), tokenizer, stop_token_ids(tokenizer), cfg, num_tasks=2, group_size=2,
                seed=0, tasks=posed)  # fmt: skip
    pool.close()
