"""A LoRA checkpoint (adapters only) loads as its base model with the adapters merged."""

import torch

from memlens.harness.model.load import load_causal_lm
from tests.tiny import save, tiny_llama, tiny_tokenizer, train_on_texts


def test_lora_checkpoint_loads_merged_and_matches_the_trained_adapter_model(tmp_path):
    from peft import LoraConfig, get_peft_model

    texts = ["def add(a, b):\n    return a + b\n", "import os\nprint(os.getcwd())\n"] * 4
    tok = tiny_tokenizer(texts, vocab_size=300)
    base_dir = save(tiny_llama(tok, hidden=32, layers=1, heads=2), tok, tmp_path / "base")
    peft_model = get_peft_model(tiny_llama(tok, hidden=32, layers=1, heads=2),
                                LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           task_type="CAUSAL_LM", init_lora_weights=False))
    peft_model.peft_config["default"].base_model_name_or_path = str(base_dir)
    train_on_texts(peft_model, tok, texts, steps=3, lr=1e-2)
    ckpt = tmp_path / "checkpoint-3"
    peft_model.save_pretrained(str(ckpt))
    tok.save_pretrained(str(ckpt))
    assert (ckpt / "adapter_config.json").is_file() and not (ckpt / "model.safetensors").exists()

    model, _ = load_causal_lm(ckpt, "cpu")
    ids = torch.tensor([tok(texts[0])["input_ids"]])
    with torch.no_grad():
        expected = peft_model.eval()(input_ids=ids).logits
        base = load_causal_lm(base_dir, "cpu")[0](input_ids=ids).logits
        got = model(input_ids=ids).logits
    assert not hasattr(model, "peft_config")              # merged into a plain model
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(got, base, atol=1e-3)       # the adapters changed the model
