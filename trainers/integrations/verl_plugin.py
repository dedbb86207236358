"""Import hook for verl's processes: registers TurnRL's estimators and the ``turnrl_sync`` v1 trainer.

verl imports the modules named in ``VERL_USE_EXTERNAL_MODULES`` when ``verl`` itself is imported, in every process
(the driver, its ``TaskRunner`` actor, the workers), which is where its registries live. Launch with::

    +ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=trainers.integrations.verl_plugin

(``examples/verl/`` does), then ``algorithm.adv_estimator=turnrl_mt_grpo`` and ``trainer.v1.trainer_mode=turnrl_sync``.
"""

from __future__ import annotations

from trainers.integrations.verl_turnrl import register_verl_estimators, turnrl_trainer_class

ESTIMATORS = register_verl_estimators()
TRAINER = turnrl_trainer_class()
