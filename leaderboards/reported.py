"""The papers' reported numbers, shown as reference rows (marked "reported") beside our runs.

Values are copied from the seed papers' tables in the papers' own units (τ-bench in %); ``None`` marks a cell the
paper does not report. Each row names the model and the setup it was measured in, which differ from ours (see each
family's ``notes``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportedRow:
    """One row of a paper's table.

    Attributes:
        family: the :data:`~leaderboards.families.FAMILIES` key it belongs to.
        env_id: the env it is compared with (``None``: every env of the family).
        model: the model (and training) as the paper names it.
        setup: where the numbers were measured (dataset, turns, simulator).
        source: the seed and table.
        values: column key -> the reported number, in the table's display units.
        group: values of the family's ``group_by`` columns (e.g. ``{"dataset": "NQ"}``).
    """

    family: str
    env_id: str | None
    model: str
    setup: str
    source: str
    values: dict[str, float | None]
    group: dict[str, str] | None = None


def _wiki(model: str, tool: float, search: float, xml: float, em: float) -> ReportedRow:
    return ReportedRow(
        "wiki_two_turn",
        None,
        model,
        "TriviaQA validation, Wikipedia search (pyserini), 2 turns",
        "000 Table 2",
        {"tool_execution": tool, "search_answer": search, "xml_format": xml, "exact_match": em},
    )


_DATASETS = ("NQ", "TriviaQA", "PopQA", "HotpotQA", "2wiki", "Musique", "Avg.")
# 001 Table 2: (answer correctness per dataset, format correctness per dataset or None)
_SEARCH_R1: dict[str, tuple[tuple[float, ...], tuple[float, ...] | None]] = {
    "Qwen2.5-7B-Base": (
        (0.177, 0.319, 0.181, 0.160, 0.167, 0.040, 0.174),
        (0.118, 0.118, 0.105, 0.098, 0.084, 0.082, 0.101),
    ),
    "Qwen2.5-7B-Instruct": (
        (0.320, 0.563, 0.349, 0.292, 0.277, 0.118, 0.320),
        (0.183, 0.267, 0.067, 0.109, 0.037, 0.071, 0.122),
    ),
    "Qwen2.5-7B + GRPO-OR (Search-R1)": (
        (0.391, 0.560, 0.388, 0.331, 0.306, 0.129, 0.351),
        (0.706, 0.685, 0.597, 0.513, 0.376, 0.328, 0.534),
    ),
    "Qwen2.5-7B + GRPO-MR (Search-R1, copied by 001)": ((0.453, 0.628, 0.450, 0.416, 0.375, 0.164, 0.414), None),
    "Qwen2.5-7B + PPO-OR (Search-R1)": (
        (0.483, 0.639, 0.456, 0.435, 0.382, 0.199, 0.432),
        (0.909, 0.954, 0.952, 0.916, 0.806, 0.834, 0.895),
    ),
    "Qwen2.5-7B + PPO-MR (Search-R1, copied by 001)": ((0.472, 0.629, 0.452, 0.436, 0.402, 0.180, 0.429), None),
    "Qwen2.5-7B + GRPO (OTC, copied by 001)": ((0.444, 0.597, 0.431, 0.366, 0.311, 0.130, 0.380), None),
    "Qwen2.5-7B + PPO (OTC, copied by 001)": ((0.446, 0.623, 0.425, 0.383, 0.363, 0.152, 0.399), None),
    "Qwen2.5-7B + PPO (StepSearch)": (
        (0.355, 0.570, 0.385, 0.351, 0.396, 0.179, 0.373),
        (0.521, 0.614, 0.668, 0.560, 0.396, 0.571, 0.555),
    ),
    "Qwen2.5-7B + MT-PPO": (
        (0.490, 0.647, 0.459, 0.453, 0.424, 0.209, 0.447),
        (0.999, 0.997, 0.999, 0.998, 0.999, 0.999, 0.999),
    ),
}


def _search_r1_rows() -> list[ReportedRow]:
    rows = []
    for model, (answer, fmt) in _SEARCH_R1.items():
        for i, dataset in enumerate(_DATASETS):
            rows.append(
                ReportedRow(
                    "search_r1",
                    None,
                    model,
                    "E5 over Wikipedia 2018, 3 passages, 4 turns",
                    "001 Table 2",
                    {"answer": answer[i], "format": None if fmt is None else fmt[i], "retrieval": None},
                    {"dataset": dataset},
                )
            )
    return rows


def _sokoban(model: str, success: float, ear: float) -> ReportedRow:
    return ReportedRow(
        "sokoban",
        None,
        model,
        "6x6, 1 box, 3 turns x 3 actions, RL step 300",
        "001 Table 5",
        {"success": success, "effective_action_rate": ear},
    )


def _tau(
    env_id: str, model: str, passes: tuple[float, float, float, float], source: str, *, output_check: bool = False
) -> ReportedRow:
    domain = "retail" if "Retail" in env_id else "airline"
    return ReportedRow(
        "tau",
        env_id,
        model,
        f"τ-bench {domain} test, LLM user, ≤30 turns",
        source,
        {"pass^1": passes[0], "pass^2": passes[1], "pass^3": passes[2], "pass^4": passes[3], "success": None},
        {"output_check": "on" if output_check else "off"},
    )


Passes = tuple[float, float, float, float]


def _tau_checked(model: str, retail: Passes, airline: Passes | None, source: str) -> list[ReportedRow]:
    """Rows of 003 Tables 6–7 (with the output check): retail, and airline when the table has it."""
    rows = [_tau(_RETAIL, model, retail, source, output_check=True)]
    if airline is not None:
        rows.append(_tau(_AIRLINE, model, airline, source, output_check=True))
    return rows


def _speech(mode: str, model: str, passes: tuple[float, float, float, float]) -> ReportedRow:
    return ReportedRow(
        "speech",
        "TurnRL/TauRetailSpeech-v2",
        model,
        "τ-bench retail test, LLM user (SeedTTS voice in speech mode)",
        "003 Table 3",
        {"pass^1": passes[0], "pass^2": passes[1], "pass^3": passes[2], "pass^4": passes[3], "success": None},
        {"eval mode": mode},
    )


_RETAIL, _AIRLINE = "TurnRL/TauRetail-v2", "TurnRL/TauAirline-v2"

REPORTED: list[ReportedRow] = [
    _wiki("Qwen2.5-7B-Base", 0.0559, 0.0934, 0.1562, 0.0469),
    _wiki("Qwen2.5-7B-Instruct", 0.1626, 0.2814, 0.1982, 0.1559),
    _wiki("Qwen2.5-7B-Base + GRPO-OR", 0.0, 0.0, 0.04, 0.0),
    _wiki("Qwen2.5-7B-Base + GRPO-MR", 0.2, 0.3724, 0.1994, 0.3346),
    _wiki("Qwen2.5-7B-Base + MT-GRPO", 0.2, 0.3926, 0.1996, 0.5010),
    *_search_r1_rows(),
    _sokoban("Qwen2.5-VL-3B + GRPO-OR", 0.0781, 0.2604),
    _sokoban("Qwen2.5-VL-3B + GRPO-MR", 0.2578, 0.6771),
    _sokoban("Qwen2.5-VL-3B + PPO-OR", 0.3828, 0.6953),
    _sokoban("Qwen2.5-VL-3B + PPO-MR", 0.5078, 0.8451),
    _sokoban("Qwen2.5-VL-3B + MT-PPO", 0.6563, 0.9870),
    _tau(_RETAIL, "GPT-4.1", (60.9, 55.7, 51.3, 47.8), "003 Table 1"),
    _tau(_RETAIL, "Llama-xLAM-2-8B", (42.6, 34.8, 28.7, 26.1), "003 Table 1"),
    _tau(_RETAIL, "Qwen3-8B", (42.6, 30.4, 25.2, 21.7), "003 Table 1"),
    _tau(_RETAIL, "Qwen3-8B + GRPO (n=4)", (51.3, 37.4, 30.4, 27.0), "003 Table 1"),
    _tau(_RETAIL, "Qwen3-8B + RLOO (n=4)", (47.0, 31.3, 28.7, 24.3), "003 Table 1"),
    _tau(_RETAIL, "Qwen3-8B + PPO (n=4)", (48.7, 36.5, 31.3, 26.1), "003 Table 1"),
    _tau(_RETAIL, "Qwen3-8B + GRPO + TARL", (53.9, 40.9, 33.9, 30.4), "003 Table 2"),
    _tau(_RETAIL, "Qwen3-8B + GRPO + Math + TARL", (57.4, 42.6, 36.5, 33.9), "003 Table 2"),
    _tau(_RETAIL, "Qwen3-8B + PPO + Math + TARL", (53.0, 40.0, 35.7, 31.3), "003 Table 2"),
    _tau(_AIRLINE, "GPT-4.1", (48, 34, 26, 24), "003 Table 1"),
    _tau(_AIRLINE, "Llama-xLAM-2-8B", (36, 26, 20, 18), "003 Table 1"),
    _tau(_AIRLINE, "Qwen3-8B", (32, 24, 20, 20), "003 Table 1"),
    _tau(_AIRLINE, "Qwen3-8B + GRPO (n=4)", (28, 14, 8, 4), "003 Table 1"),
    _tau(_AIRLINE, "Qwen3-8B + RLOO (n=4)", (36, 20, 16, 12), "003 Table 1"),
    _tau(_AIRLINE, "Qwen3-8B + PPO (n=4)", (32, 22, 14, 12), "003 Table 1"),
    *_tau_checked("GPT-4.1", (58.3, 53.0, 49.6, 46.1), (48, 34, 26, 24), "003 Table 6"),
    *_tau_checked("xLAM-2-8B", (41.7, 30.4, 25.2, 22.6), (32, 24, 18, 16), "003 Table 6"),
    *_tau_checked("Qwen3-8B", (40.0, 27.8, 22.6, 18.3), (30, 20, 18, 18), "003 Table 6"),
    *_tau_checked("Qwen3-8B + GRPO (n=4)", (47.0, 35.7, 27.8, 24.3), (28, 12, 6, 2), "003 Table 6"),
    *_tau_checked("Qwen3-8B + RLOO (n=4)", (44.3, 29.6, 26.1, 21.7), (34, 18, 14, 10), "003 Table 6"),
    *_tau_checked("Qwen3-8B + PPO (n=4)", (47.0, 33.9, 28.7, 22.6), (30, 20, 12, 10), "003 Table 6"),
    *_tau_checked("Qwen3-8B + PPO (n=1)", (47.0, 26.1, 18.3, 15.7), (30, 16, 8, 6), "003 Table 6"),
    *_tau_checked("Qwen3-8B + GRPO + Turn-Level Reward", (52.2, 39.1, 29.6, 26.1), None, "003 Table 7"),
    *_tau_checked("Qwen3-8B + GRPO + Math + Turn-Level Reward", (53.9, 40.0, 34.8, 30.4), None, "003 Table 7"),
    *_tau_checked("Qwen3-8B + PPO + Math + Turn-Level Reward", (52.2, 39.1, 34.8, 30.4), None, "003 Table 7"),
    _speech("text", "Qwen2.5-Omni-7B", (7.8, 7.8, 7.8, 7.8)),
    _speech("speech", "Qwen2.5-Omni-7B", (14.8, 8.7, 5.2, 5.2)),
    _speech("text", "Qwen2.5-Omni-7B + GRPO + Math (S & T)", (31.3, 20.9, 12.2, 12.2)),
    _speech("text", "Qwen2.5-Omni-7B + GRPO + Math + TARL (S & T)", (36.5, 25.2, 21.7, 16.5)),
    _speech("speech", "Qwen2.5-Omni-7B + GRPO + Math (S & T)", (34.8, 25.2, 21.7, 16.5)),
    _speech("speech", "Qwen2.5-Omni-7B + GRPO + Math + TARL (S & T)", (37.4, 26.1, 22.6, 20.9)),
    _speech("speech", "Qwen2.5-Omni-7B + GRPO + Math + TARL (T-only)", (32.2, 18.3, 14.8, 11.3)),
]


def reported_rows(family: str, env_id: str) -> list[ReportedRow]:
    """The reported rows of ``family`` that compare with ``env_id``."""
    return [r for r in REPORTED if r.family == family and r.env_id in (None, env_id)]
