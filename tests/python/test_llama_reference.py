"""octet's LLaMA against independent references: a float64 numpy forward pass written
from the LLaMA equations, the safetensors library (names, dtypes, shapes of a checkpoint
are Hugging Face's), and, where torch and transformers are installed, LlamaForCausalLM."""
import json
import os
import subprocess
import tempfile

import numpy as np
import pytest
from safetensors.numpy import load_file

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.join(BUILD, "octet")
FORWARD = os.path.join(BUILD, "tests", "llama_forward")

CONFIG = {  # small but with every feature: GQA, untied head, odd vocabulary
    "vocab_size": 101, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def checkpoint():
    tmp = tempfile.mkdtemp(prefix="octet-llama-")
    cfg = os.path.join(tmp, "model.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    # A few fp32 steps so the weights are not just the initialisation.
    subprocess.run([OCTET, "train", "--model", cfg, "--precision", "fp32", "--steps", "3",
                    "--batch", "2", "--out", os.path.join(tmp, "run"), "--quiet",
                    "--train-tokens", "4096", "--val-tokens", "1024"], check=True)
    with open(os.path.join(tmp, "run", "latest")) as f:
        step_dir = os.path.join(tmp, "run", f.read().strip())
    return tmp, step_dir


def hf_names(c):
    names = {"model.embed_tokens.weight": (c["vocab_size"], c["hidden_size"]),
             "model.norm.weight": (c["hidden_size"],),
             "lm_head.weight": (c["vocab_size"], c["hidden_size"])}
    hd = c["hidden_size"] // c["num_attention_heads"]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        names[p + "input_layernorm.weight"] = (c["hidden_size"],)
        names[p + "post_attention_layernorm.weight"] = (c["hidden_size"],)
        names[p + "self_attn.q_proj.weight"] = (c["num_attention_heads"] * hd, c["hidden_size"])
        names[p + "self_attn.k_proj.weight"] = (c["num_key_value_heads"] * hd, c["hidden_size"])
        names[p + "self_attn.v_proj.weight"] = (c["num_key_value_heads"] * hd, c["hidden_size"])
        names[p + "self_attn.o_proj.weight"] = (c["hidden_size"], c["num_attention_heads"] * hd)
        names[p + "mlp.gate_proj.weight"] = (c["intermediate_size"], c["hidden_size"])
        names[p + "mlp.up_proj.weight"] = (c["intermediate_size"], c["hidden_size"])
        names[p + "mlp.down_proj.weight"] = (c["hidden_size"], c["intermediate_size"])
    return names


def test_checkpoint_has_hf_llama_names_dtypes_and_shapes(checkpoint):
    _, step_dir = checkpoint
    tensors = load_file(os.path.join(step_dir, "model.safetensors"))
    expected = hf_names(CONFIG)
    assert set(tensors) == set(expected)
    for name, shape in expected.items():
        assert tensors[name].dtype == np.float32, name
        assert tensors[name].shape == shape, name
    with open(os.path.join(step_dir, "config.json")) as f:
        cfg = json.load(f)
    for key, value in CONFIG.items():
        assert cfg[key] == value, key
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"]


def numpy_llama(w, c, ids):
    """The LLaMA forward pass in float64, from the equations (HF conventions)."""
    d, hq, hkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd, eps = d // hq, c["rms_norm_eps"]
    B, S = ids.shape
    W = {k: v.astype(np.float64) for k, v in w.items()}

    def rms(x, g):
        return g * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))

    inv = 1.0 / (c["rope_theta"] ** (np.arange(0, hd, 2) / hd))
    ang = np.arange(S)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)
    sin = np.concatenate([np.sin(ang)] * 2, -1)

    def rope(x):  # x [B, H, S, hd]
        half = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos + half * sin

    x = W["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((S, S), -np.inf), 1)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(B, S, hq, hd).transpose(0, 2, 1, 3)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(B, S, hkv, hd).transpose(0, 2, 1, 3)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(B, S, hkv, hd).transpose(0, 2, 1, 3)
        q, k = rope(q), rope(k)
        k = np.repeat(k, hq // hkv, axis=1)
        v = np.repeat(v, hq // hkv, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(0, 2, 1, 3).reshape(B, S, d)
        x = x + a @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms(x, W["model.norm.weight"])
    return x @ W["lm_head.weight"].T


def run_octet(checkpoint, ids, targets):
    tmp, step_dir = checkpoint
    batch = os.path.join(tmp, "batch.bin")
    np.concatenate([ids.ravel(), targets.ravel()]).astype(np.int32).tofile(batch)
    out = os.path.join(tmp, "logits.bin")
    B, S = ids.shape
    res = subprocess.run([FORWARD, step_dir, batch, out, str(B), str(S)], check=True,
                         capture_output=True, text=True)
    logits = np.fromfile(out, dtype=np.float32).reshape(B, S, CONFIG["vocab_size"])
    return logits, json.loads(res.stdout)["loss"]


def test_fp32_logits_and_loss_match_a_float64_numpy_llama(checkpoint):
    _, step_dir = checkpoint
    rng = np.random.default_rng()
    ids = rng.integers(0, CONFIG["vocab_size"], size=(2, 16))
    targets = rng.integers(0, CONFIG["vocab_size"], size=(2, 16))
    weights = load_file(os.path.join(step_dir, "model.safetensors"))
    ref = numpy_llama(weights, CONFIG, ids)
    logits, loss = run_octet(checkpoint, ids, targets)
    # The bound: 1e-5 relative, measured against the largest logit (fp32 math over
    # a 2-layer, width-64 model accumulates a few hundred roundings of 2^-24 each).
    scale = np.abs(ref).max()
    assert np.abs(logits - ref).max() <= 1e-5 * scale
    lse = np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1)) + ref.max(-1)
    ref_loss = np.mean(lse - np.take_along_axis(ref, targets[..., None], -1)[..., 0])
    assert abs(loss - ref_loss) <= 1e-5 * abs(ref_loss)


def test_hugging_face_llama_gives_the_same_logits(checkpoint):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    _, step_dir = checkpoint
    model = transformers.LlamaForCausalLM.from_pretrained(step_dir, torch_dtype=torch.float32)
    model.eval()
    rng = np.random.default_rng()
    ids = rng.integers(0, CONFIG["vocab_size"], size=(2, 16))
    with torch.no_grad():
        hf = model(torch.tensor(ids)).logits.double().numpy()
    logits, _ = run_octet(checkpoint, ids, ids)
    # Both fp32: the same 1e-5 relative bound as against numpy.
    assert np.abs(logits - hf).max() <= 1e-5 * np.abs(hf).max()
