"""TRL's GRPO trains a tiny language model on a troupe game, through OpenEnv.

    python examples/trl/troupe_grpo.py --troupe out/troupe [--steps 30] [--out DIR]
    python examples/trl/troupe_grpo.py --url URL [--steps 30] [--out DIR]

Needs torch 2.15.0, transformers 5.23.0, trl 1.16.0 and openenv-core 0.3.0
from PyPI (make trl-grpo runs it in the cached pyenv-llm). Nothing is
downloaded: the tokenizer (one token per character) and the model (a
Qwen2 of two layers, 64 wide) are built here from a config and seeded.

The game is El Farol for two patrons and ten nights at capacity 1, served by
`troupe env-serve` (started here) as a default episode: the learner holds
patron-0, troupe's first-night policy plays patron-1 (always night 0). The
learner's score: 1/e for a night alone, 2/e^2 on night 0 with the other, 0
for an answer that is no night (troupe counts it as staying home). So the
model has two things to learn: to answer with a night, then to avoid night 0.

The loop is TRL's GRPOTrainer with a rollout_func (TRL's path for an
environment that is stepped by code rather than called as tools): for each
prompt of a group, OpenEnv's GenericEnvClient resets the episode (one seed
per group, so the group shares its prompt) over troupe's WebSocket, the
model samples an answer from the observation's view, and the step sends the
answer with the generation's token ids and log-probs, which troupe keeps in
the turn's sample. The episode's reward (its agent score, allocator
individual) is the GRPO reward.

At the end the server's samples file is compared with the trainer's own
accounting: every rollout's prompt_ids + completion_ids equal its sample's
tokens, its reward the sample's, and the trainer's num_input_tokens_seen
equals the tokens of the samples. A JSON summary (steps, losses, rewards,
the checks) goes to stdout and DIR/summary.json; the exit status is 1 when
a check fails. With --url the server is one already running (started
with the arguments SERVE_ARGS holds), which writes the samples: the script
then trains, writes its rollouts (DIR/rollouts.jsonl) and the summary, and
leaves the comparison to whoever stops the server (cli's TestTRLGRPO).
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

SEAT = "patron-0"
# The rollout_id of the trainer's first episode: the server numbers the
# episodes of resets that bring none (the tokenizer's probe) from 0.
ROLLOUT_BASE = 1000
SERVE_ARGS = ["--scenario", "elfarol", "--param", "agents=2", "--param", "nights=10", "--param", "capacity=1",
              "--open", SEAT, "--policy", "patron=first-night"]


def start_server(troupe, samples):
    """Starts troupe env-serve on a free loopback port; returns (process, url)."""
    proc = subprocess.Popen([troupe, "env-serve", "--addr", "127.0.0.1:0", "-o", samples, *SERVE_ARGS],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"environment server on (http://\S+)", line)
        if m:
            return proc, m.group(1)
        sys.stderr.write(line)
    raise SystemExit(f"troupe env-serve did not start (exit {proc.wait()})")


def build_tokenizer(text):
    """A tokenizer of one token per character of text (and the digits)."""
    specials = ["<pad>", "<unk>", "<bos>", "<eos>"]
    vocab = {t: i for i, t in enumerate(specials + sorted(set(text) | set("0123456789")))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>", padding_side="left")


def build_model(tokenizer, seed):
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return Qwen2ForCausalLM(cfg)


class Rollouts:
    """TRL's rollout_func over troupe env-serve, through OpenEnv's client."""

    def __init__(self, env, tokenizer, num_generations, max_new_tokens, temperature):
        self.env, self.tok = env, tokenizer
        self.g, self.max_new, self.temperature = num_generations, max_new_tokens, temperature
        self.next_rollout = ROLLOUT_BASE
        self.log = []  # every rollout: its ids, reward and troupe's rollout_id

    def __call__(self, prompts, trainer):
        model = trainer.accelerator.unwrap_model(trainer.model)
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_reward": []}
        for start in range(0, len(prompts), self.g):
            group = prompts[start:start + self.g]
            seed = int(group[0].split()[-1])
            view = prompt_ids = completions = logprobs = None
            for k in range(len(group)):
                rid = self.next_rollout
                self.next_rollout += 1
                # One episode per completion, all of the group's seed:
                # illegal answers are the game's to judge (staying home).
                res = self.env.reset(seed=seed, rollout_id=rid, allocators=["individual"], pass_illegal=True)
                if view is None:
                    # The group's prompt: the view troupe shows the seat.
                    view = res.observation["pending"][0]["view"]
                    prompt_ids = self.tok(view)["input_ids"]
                    completions, logprobs = self.sample(model, prompt_ids, len(group))
                assert res.observation["pending"][0]["view"] == view, "a group shares its prompt"
                ids, lps = completions[k], logprobs[k]
                text = self.tok.decode(ids, skip_special_tokens=True)
                res = self.env.step({"move": text, "generation": {
                    "prompt_ids": prompt_ids, "completion_ids": ids, "logprobs": lps, "prompt": view}})
                assert res.done, res
                out["prompt_ids"].append(prompt_ids)
                out["completion_ids"].append(ids)
                out["logprobs"].append(lps)
                out["env_reward"].append(float(res.reward))
                self.log.append({"rollout_id": rid, "prompt_ids": prompt_ids, "completion_ids": ids,
                                 "move": text, "reward": float(res.reward)})
        return out

    @torch.no_grad()
    def sample(self, model, prompt_ids, n):
        """n completions of the prompt, and each token's log-probability."""
        was_training = model.training
        model.eval()
        inp = torch.tensor([prompt_ids] * n)
        gen = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=True, temperature=self.temperature,
                             top_k=0, top_p=1.0, max_new_tokens=self.max_new, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=self.tok.pad_token_id,
                             eos_token_id=self.tok.eos_token_id)
        if was_training:
            model.train()
        seqs = gen.sequences[:, len(prompt_ids):]
        logps = torch.stack([torch.log_softmax(lg.float() / self.temperature, dim=-1) for lg in gen.logits], dim=1)
        completions, lps = [], []
        for i in range(n):
            ids = seqs[i].tolist()
            if self.tok.eos_token_id in ids:  # keep the EOS, drop what follows it
                ids = ids[:ids.index(self.tok.eos_token_id) + 1]
            completions.append(ids)
            lps.append([logps[i, j, t].item() for j, t in enumerate(ids)])
        return completions, lps


def env_reward(prompts, completions, env_reward, **kwargs):
    """The episode's reward, as troupe scored it."""
    return env_reward


class StepLog(TrainerCallback):
    def __init__(self):
        self.rows = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.rows.append({"step": state.global_step, "loss": logs["loss"], "reward": logs.get("reward"),
                              "reward_std": logs.get("reward_std"), "num_tokens": logs.get("num_tokens")})


def check(samples_path, rollouts, tokens_seen):
    """Compares the server's samples with the trainer's rollouts."""
    samples = {}
    with open(samples_path) as f:
        for line in f:
            s = json.loads(line)
            if s["metadata"]["agent"] == SEAT and s["rollout_id"] >= ROLLOUT_BASE:
                samples[s["rollout_id"]] = s
    mismatches = []
    total = 0
    for r in rollouts:
        s = samples.get(r["rollout_id"])
        if s is None:
            mismatches.append(f"rollout {r['rollout_id']}: no sample")
            continue
        total += len(s["tokens"])
        if s["tokens"] != r["prompt_ids"] + r["completion_ids"] or s["response_length"] != len(r["completion_ids"]):
            mismatches.append(f"rollout {r['rollout_id']}: tokens differ")
        if abs(s["reward"] - r["reward"]) > 1e-12:
            mismatches.append(f"rollout {r['rollout_id']}: reward {s['reward']} != {r['reward']}")
        if s["response"] != r["move"]:
            mismatches.append(f"rollout {r['rollout_id']}: response {s['response']!r} != {r['move']!r}")
    return {"rollouts": len(rollouts), "samples": len(samples), "mismatches": mismatches[:10],
            "sample_tokens": total, "trainer_num_input_tokens_seen": tokens_seen,
            "ok": not mismatches and len(samples) == len(rollouts) and total == tokens_seen}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--troupe", help="the troupe binary: the script starts troupe env-serve")
    src.add_argument("--url", help="a running troupe env-serve, started with SERVE_ARGS")
    ap.add_argument("--steps", type=int, default=30, help="optimisation steps")
    ap.add_argument("--groups", type=int, default=2, help="GRPO groups (prompts) per step")
    ap.add_argument("--generations", type=int, default=8, help="completions per group")
    ap.add_argument("--max-new-tokens", type=int, default=1, help="tokens per answer (a night is one)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="where the samples and summary go (default a temporary directory)")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="troupe-grpo-")
    os.makedirs(out, exist_ok=True)
    samples = os.path.join(out, "samples.jsonl")
    if args.troupe and os.path.exists(samples):
        os.remove(samples)  # the server appends

    proc, url = start_server(args.troupe, samples) if args.troupe else (None, args.url)
    try:
        with GenericEnvClient(base_url=url).sync() as env:
            probe = env.reset(seed=0)
            pending = probe.observation["pending"]
            assert [p["agent"] for p in pending] == [SEAT], f"the server's default episode is not SERVE_ARGS': {pending}"
            view = pending[0]["view"]
            tokenizer = build_tokenizer(view)
            model = build_model(tokenizer, args.seed)
            rollouts = Rollouts(env, tokenizer, args.generations, args.max_new_tokens, temperature=1.0)
            n = args.steps * args.groups
            data = Dataset.from_dict({"prompt": [f"episode seed {1000 + i}" for i in range(n)]})
            cfg = GRPOConfig(output_dir=os.path.join(out, "trainer"), max_steps=args.steps, learning_rate=args.lr,
                             per_device_train_batch_size=args.groups * args.generations,
                             num_generations=args.generations, max_completion_length=args.max_new_tokens,
                             beta=0.0, logging_steps=1, report_to="none", use_cpu=True, seed=args.seed,
                             save_strategy="no", shuffle_dataset=False, lr_scheduler_type="constant",
                             dataloader_num_workers=0)
            steplog = StepLog()
            trainer = GRPOTrainer(model=model, reward_funcs=env_reward, args=cfg, train_dataset=data,
                                  processing_class=tokenizer, rollout_func=rollouts, callbacks=[steplog])
            trainer.train()
            tokens_seen = int(trainer.state.num_input_tokens_seen)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    with open(os.path.join(out, "rollouts.jsonl"), "w") as f:
        for r in rollouts.log:
            f.write(json.dumps(r) + "\n")
    if proc is not None:
        result = check(samples, rollouts.log, tokens_seen)
    else:
        result = {"rollouts": len(rollouts.log), "trainer_num_input_tokens_seen": tokens_seen, "ok": True}
    rewards = [r["reward"] for r in steplog.rows]
    k = max(1, len(rewards) // 5)
    valid = [sum(1 for r in rollouts.log[i:i + args.groups * args.generations] if r["reward"] > 0)
             / (args.groups * args.generations) for i in range(0, len(rollouts.log), args.groups * args.generations)]
    summary = {"server": " ".join(["troupe env-serve", *SERVE_ARGS]), "vocab": len(tokenizer),
               "parameters": sum(p.numel() for p in model.parameters()), "steps": len(steplog.rows),
               "log": steplog.rows, "valid_fraction_by_step": valid,
               "reward_first": sum(rewards[:k]) / k, "reward_last": sum(rewards[-k:]) / k,
               "moves_last_step": [r["move"] for r in rollouts.log[-args.groups * args.generations:]],
               "check": result, "samples": samples if proc is not None else None}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))
    if not result["ok"] or len(steplog.rows) < args.steps:
        sys.exit(1)


if __name__ == "__main__":
    main()
