"""Real training runs on the embedded backend: the policy gets clearly better, per estimator."""

from __future__ import annotations

import numpy as np
import pytest

from rllm import register_rllm_adv_estimator
from rllm.errors import ConfigError
from rllm.experimental.unified_trainer import TrainerState, UnifiedTrainer
from rllm.types import Episode, Step, TerminationReason, Trajectory
from rllm.workflows.workflow import Workflow


def _pass_at_1(records: list[dict]) -> list[float]:
    return [r["val/digit_sum/pass@1"] for r in records if r["kind"] == "val"]


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_short_run_clearly_improves_validation(make_config, estimator: str, train) -> None:
    config = make_config(
        f"rllm.algorithm.adv_estimator={estimator}", "rllm.trainer.total_epochs=6", "rllm.trainer.test_freq=15"
    )
    _, records = train(config)
    curve = _pass_at_1(records)
    train_steps = [r["step"] for r in records if r["kind"] == "train"]
    assert train_steps == list(range(1, 31))
    assert curve[0] < 0.3
    assert curve[-1] >= 0.75, curve
    rewards = [r["reward/solver/mean"] for r in records if r["kind"] == "train"]
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.4


def test_estimator_name_reaches_the_update(make_config, plugin_manager, train) -> None:
    """A runtime-registered estimator chosen by name computes the advantages that train the policy."""
    calls: list[int] = []

    @register_rllm_adv_estimator("centred_for_test")
    def centred(rewards, **kwargs):
        calls.append(len(rewards))
        advantages = [r - r.mean() for r in rewards]
        return advantages, advantages

    config = make_config("rllm.algorithm.adv_estimator=centred_for_test", "rllm.trainer.total_batches=3")
    _, records = train(config)
    assert calls == [20, 20, 20]  # one call per step, with one reward array per group (task)
    assert all("advantage/solver/mean" in r for r in records if r["kind"] == "train")


def test_estimator_map_per_role_from_config_and_constructor(make_config, plugin_manager, train) -> None:
    seen: list[str] = []

    @register_rllm_adv_estimator("tagging_for_test")
    def tagging(rewards, **kwargs):
        seen.append("tagging")
        return [np.zeros_like(r) for r in rewards], [np.zeros_like(r) for r in rewards]

    config = make_config("rllm.algorithm.estimator_map.solver=tagging_for_test", "rllm.trainer.total_batches=2")
    _, records = train(config)
    assert seen == ["tagging", "tagging"]
    steps = [r for r in records if r["kind"] == "train"]
    assert all(r["advantage/solver/fraction_zero"] == 1.0 for r in steps)
    assert all(r["actor/grad_norm"] == 0.0 for r in steps)  # the update follows the estimator's advantages

    seen.clear()
    plain = make_config("rllm.trainer.total_batches=1", "rllm.trainer.resume_mode=disable")
    train(plain, traj_group_adv_estimator_map={"solver": "tagging_for_test"})
    assert seen == ["tagging"]


def test_unknown_estimator_fails_before_any_rollout(make_config) -> None:
    from rllm.errors import ConfigError

    config = make_config()
    config.rllm.algorithm.adv_estimator = "rlooo"  # set after load_config: the trainer checks it again
    with pytest.raises(ConfigError, match=r"adv_estimator.*'rlooo'.*Did you mean 'rloo'"):
        UnifiedTrainer(None, config)
    config = make_config()
    config.rllm.algorithm.estimator_map = {"solver": "rlooo"}  # checked again too, naming the role's key
    with pytest.raises(ConfigError, match=r"estimator_map.solver must be one of .*'rlooo'.*Did you mean 'rloo'"):
        UnifiedTrainer(None, config)


def test_estimator_map_role_that_never_occurs_warns(make_config, train) -> None:
    from rllm.errors import RLLMWarning

    config = make_config("rllm.algorithm.estimator_map.solvr=rloo", "rllm.trainer.total_batches=1")
    with pytest.warns(RLLMWarning, match="role 'solvr'.*\\['solver'\\]"):
        train(config)


def test_trainer_state_is_exported_at_the_documented_path() -> None:
    state = TrainerState(global_step=3)
    state.metrics["x"] = 1.0
    state.reset_batch()
    assert state.global_step == 3 and state.metrics == {} and not state.has_episodes


def test_multi_step_task_learns(make_config, train) -> None:
    config = make_config("rllm.embedded.tasks=[digit_chain]", "rllm.trainer.total_epochs=6", "rllm.trainer.test_freq=0")
    _, records = train(config)
    rewards = [r["reward/solver/mean"] for r in records if r["kind"] == "train"]
    assert records[0]["kind"] == "val" and records[0]["val/digit_chain/pass@1"] < 0.05
    assert np.mean(rewards[-5:]) > 0.3 > np.mean(rewards[:3])
    assert max(r["batch/turns"] for r in records if r["kind"] == "train") > 1.5


class TwoRoleWorkflow(Workflow):
    """The built-in sum task answered by a solver, then by a second role on the same prompt."""

    async def run(self, task: dict, uid: str, **kwargs) -> Episode:
        trajectories = []
        for role in ("solver", "checker"):
            reply = await self.rollout_engine.generate([*task["prompt"], len(role)], max_tokens=1)
            reward = float(reply.response_ids[0] == task["answers"][0])
            step = Step(
                prompt_ids=[*task["prompt"], len(role)],
                response_ids=reply.response_ids,
                logprobs=reply.logprobs,
                reward=reward,
                done=True,
            )
            trajectories.append(Trajectory(name=role, steps=[step]))
        return Episode(
            termination_reason=TerminationReason.ENV_DONE,
            is_correct=trajectories[0].steps[0].reward == 1.0,
            trajectories=trajectories,
        )


def test_each_role_gets_its_own_estimator(make_config, plugin_manager, train) -> None:
    calls: list[tuple[str, int]] = []

    def recording(name: str):
        def estimator(rewards, **kwargs):
            calls.append((name, len(rewards)))
            advantages = [r - r.mean() for r in rewards]
            return advantages, advantages

        return estimator

    register_rllm_adv_estimator("solver_est")(recording("solver_est"))
    register_rllm_adv_estimator("checker_est")(recording("checker_est"))
    config = make_config(
        "rllm.algorithm.adv_estimator=solver_est",
        "rllm.algorithm.estimator_map.checker=checker_est",
        "rllm.trainer.total_batches=2",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.val_before_train=false",
    )
    _, records = train(config, workflow_class=TwoRoleWorkflow)
    assert sorted(calls) == [("checker_est", 20)] * 2 + [("solver_est", 20)] * 2
    assert {"reward/solver/mean", "reward/checker/mean"} <= set(records[0])


def test_turn_level_credit_trains_the_multi_turn_task(make_config, train) -> None:
    # digit_chain scores every turn; turn_grpo compares each turn with the same turn of the task's rollouts.
    config = make_config(
        "rllm.embedded.tasks=[digit_chain]",
        "rllm.algorithm.adv_estimator=turn_grpo",
        "rllm.trainer.total_epochs=6",
        "rllm.trainer.test_freq=0",
    )
    _, records = train(config)
    rewards = [r["reward/solver/mean"] for r in records if r["kind"] == "train"]
    assert np.mean(rewards[-5:]) > 0.3 > np.mean(rewards[:3])


def test_each_role_trains_with_its_own_loss(make_config, train) -> None:
    from rllm_builtin.embedded.policy import policy_loss

    config = make_config(
        "rllm.algorithm.loss_fn=ppo",
        "+rllm.algorithm.loss_fn_map.checker=importance_sampling",
        "rllm.trainer.total_batches=2",
        "rllm.trainer.test_freq=0",
    )
    trainer, records = train(config, workflow_class=TwoRoleWorkflow)
    assert [r["kind"] for r in records].count("train") == 2
    assert trainer.backend.role_losses == {"checker": "importance_sampling"}

    # Mixed losses in one minibatch: each token's terms are those of its own role's loss.
    from rllm_builtin.embedded.backend import _losses

    rng = np.random.default_rng(0)
    logp, old, adv = np.log(rng.random(6)), np.log(rng.random(6)), rng.normal(size=6)
    kinds = np.array(["ppo", "importance_sampling", "ppo", "cispo", "importance_sampling", "ppo"], dtype=object)
    mixed = _losses(kinds, logp, old, adv, 0.2, 0.2)
    for kind in ("ppo", "importance_sampling", "cispo"):
        rows = kinds == kind
        alone = policy_loss(kind, logp[rows], old[rows], adv[rows], 0.2, 0.2)
        np.testing.assert_array_equal(mixed.loss[rows], alone.loss)
        np.testing.assert_array_equal(mixed.d_logp[rows], alone.d_logp)


def test_an_unsupported_loss_for_a_role_is_named(make_config) -> None:
    config = make_config("+rllm.algorithm.loss_fn_map.checker=dro", "rllm.algorithm.loss_options.dro_beta=0.1")
    with pytest.raises(ConfigError, match=r"loss 'dro' of role 'checker'.*not supported by the embedded backend"):
        UnifiedTrainer(None, config, workflow_class=TwoRoleWorkflow, progress=False)


def test_total_batches_beyond_total_epochs_warns_and_stops_where_the_epochs_end(make_config, train) -> None:
    import math

    from rllm.errors import RLLMWarning

    config = make_config(
        "rllm.trainer.total_batches=1000", "rllm.trainer.total_epochs=2", "rllm.data.train_batch_size=50"
    )
    with pytest.warns(RLLMWarning, match=r"rllm\.trainer\.total_batches=1000 is more than the \d+ steps") as caught:
        trainer, metrics = train(config)
    expected = 2 * math.ceil(len(trainer.train_dataset) / 50)
    assert [r["step"] for r in metrics if "reward/solver/mean" in r][-1] == expected
    (warning,) = [w for w in caught if "total_batches" in str(w.message)]
    assert f"more than the {expected} steps that rllm.trainer.total_epochs=2 allows" in str(warning.message)


def test_total_batches_within_total_epochs_does_not_warn(make_config, train) -> None:
    import warnings

    from rllm.errors import RLLMWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", RLLMWarning)
        train(make_config("rllm.trainer.total_batches=2"))


def test_a_finished_run_started_again_says_it_is_complete_and_how_to_start_afresh(make_config, train, capsys) -> None:
    config = make_config("rllm.trainer.total_batches=2")
    train(config)
    capsys.readouterr()
    trainer, metrics = train(config)
    err = capsys.readouterr().err
    assert f"rllm: training already complete (2 steps) in {str(trainer.output_dir)!r}; nothing to do." in err
    assert "rllm.trainer.resume_mode=disable" in err and "rllm.trainer.experiment_name" in err
    assert [r["step"] for r in metrics if "reward/solver/mean" in r] == [1, 2]  # nothing trained again
