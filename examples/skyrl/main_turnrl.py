"""SkyRL's training entrypoint with TurnRL envs and TurnRL credit assignment (MT-GRPO, MT-PPO, TARL, ...).

    python examples/skyrl/main_turnrl.py trainer.algorithm.advantage_estimator=turnrl_mt_grpo ...

(``run_turnrl.sh`` beside this file has a whole launch.) Differences from ``skyrl.train.entrypoints.main_base``:
TurnRL's envs and estimators are registered, in this process (SkyRL's ``validate_cfg`` checks the estimator name)
and in the Ray task that trains (skyrl_gym's registry lives per process; SkyRL's registry actor hands the
estimators to the workers), and the trainer is ``RayPPOTrainer`` with TurnRL's hook, which gives TurnRL estimators
each row's loss mask and per-turn reward components (see ``trainers.integrations.skyrl_credit``).
Needs skyrl 0.3 (``pip install "skyrl[fsdp]==0.3.0"``, Python 3.12, GPUs) and ``agentgym-turn[skyrl]``.
"""

from __future__ import annotations

import sys

import ray
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.entrypoints.main_base import BasePPOExp, validate_cfg
from skyrl.train.utils import initialize_ray

from trainers.integrations.skyrl_credit import register_skyrl_estimators, turnrl_trainer_class
from trainers.integrations.skyrl_turnrl import register_skyrl_envs


class TurnRLExp(BasePPOExp):
    """SkyRL's PPO experiment with the TurnRL trainer hook."""

    def get_trainer(
        self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client, generator, colocate_pg
    ):
        return turnrl_trainer_class()(
            cfg=cfg,
            tracker=tracker,
            tokenizer=tokenizer,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client,
            generator=generator,
            colocate_pg=colocate_pg,
        )


def register() -> None:
    """Register every TurnRL env with skyrl_gym and every supported strategy as ``turnrl_<name>``."""
    register_skyrl_envs()
    register_skyrl_estimators()


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: SkyRLTrainConfig) -> None:
    register()
    TurnRLExp(cfg).run()


def main() -> None:
    register()
    cfg = SkyRLTrainConfig.from_cli_overrides(sys.argv[1:])
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(skyrl_entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
