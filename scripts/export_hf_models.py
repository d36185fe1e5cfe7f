#!/usr/bin/env python3
"""Export Hugging Face architectures to ONNX with the framework's reference outputs.

    scripts/export_hf_models.sh --size small|full --out DIR [--only NAME,NAME] [--dtype float32|float16]
                                [--exporter torchscript|dynamo]

Each model is built from transformers' own config class (random weights from a fixed seed, no hub
download) and exported by torch.onnx's TorchScript exporter at opset 17 or, with --exporter dynamo
(torch 2.x), by its dynamo exporter (torch.export and onnxscript) at that exporter's default opset
into DIR/<name>_dynamo, in the layout of ONNX's backend test data, the same as
scripts/export_models.py:

    DIR/<name>/model.onnx
    DIR/<name>/test_data_set_0/input_<i>.pb     inputs (fixed-seed token ids, features, caches)
    DIR/<name>/test_data_set_0/output_<k>.pb    torch's outputs under torch.no_grad()

Shapes are static (batch 1). The decoders come twice: a prefill of the whole prompt, and one
decode step whose key/value cache of the earlier positions comes in as inputs (past_key_<l>,
past_value_<l>) and goes out updated (present_key_<l>, present_value_<l>). --dtype float16 exports
the same models converted to float16 (weights, inputs and outputs; the reference is computed by
torch in float32 from the float16-rounded weights and inputs, then rounded). Run through
scripts/export_hf_models.sh, which provides transformers for the Debian interpreter's torch.
"""

import argparse
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import transformers

OPSET = 17
SEED = 0
INPUT_SEED = 1234

# name -> (small config, full config); sizes of "full" are the published ones of each family.
DECODER_PREFILL = 128  # prompt length of the prefill exports
DECODER_PAST = 127     # cache length of the decode-step exports


def llama_config(size, gqa):
    if size == "small":
        return transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2 if gqa else 4,
                                        max_position_embeddings=256, attn_implementation="eager")
    # TinyLlama-1.1B's shape (22 layers, 32 heads, 4 KV heads).
    return transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                    num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
                                    attn_implementation="eager")


def qwen2_config(size):
    if size == "small":
        return transformers.Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                        attn_implementation="eager")
    # Qwen2-0.5B's shape.
    return transformers.Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                    num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                                    attn_implementation="eager")


def gpt2_config(size):
    if size == "small":
        return transformers.GPT2Config(vocab_size=256, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                                       attn_implementation="eager")
    return transformers.GPT2Config(attn_implementation="eager")


class LogitsOnly(torch.nn.Module):
    """A causal LM's prefill: token ids in, logits out (no cache)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


class DecodeStep(torch.nn.Module):
    """One decode step of a causal LM: the new token and the cache in, logits and the cache out."""

    def __init__(self, model, layers):
        super().__init__()
        self.model = model
        self.layers = layers

    def forward(self, input_ids, *past):
        # A DynamicCache filled layer by layer, which transformers 4.40 and 5.x both take (5.x no
        # longer takes the tuples of tensors 4.x converted), and an all-ones mask over the cache
        # and the new token (without one, transformers 5 looks for packed sequences in the
        # position ids, which the TorchScript exporter cannot export).
        cache = transformers.DynamicCache()
        for l in range(self.layers):
            cache.update(past[2 * l], past[2 * l + 1], l)
        mask = torch.ones(1, past[0].shape[2] + input_ids.shape[1], dtype=torch.int64)
        out = self.model(input_ids=input_ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        flat = [out.logits]
        for l in range(self.layers):
            flat += list(cache_layer(out.past_key_values, l))
        return tuple(flat)


def cache_layer(cache, l):
    """Layer l's (keys, values) of the cache a model returns: transformers 4.40 gives tuples of
    tensors, 5.x the DynamicCache, whose layers hold them."""
    if hasattr(cache, "layers"):
        return cache.layers[l].keys, cache.layers[l].values
    return cache[l]


class LastHidden(torch.nn.Module):
    """An encoder: its last hidden state."""

    def __init__(self, model, key):
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, x):
        return self.model(**{self.key: x}).last_hidden_state


class EncoderLayer(torch.nn.Module):
    """One encoder layer alone: hidden states in, hidden states out (no embeddings, no mask)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)[0]


def token_ids(gen, vocab, length):
    return torch.randint(0, vocab, (1, length), generator=gen)


def decoder_prefill(cfg, gen, length=DECODER_PREFILL):
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    return LogitsOnly(model), [("input_ids", token_ids(gen, cfg.vocab_size, length))], ["logits"]


def decoder_step(cfg, gen, past=DECODER_PAST):
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    layers = cfg.num_hidden_layers
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = cfg.hidden_size // heads
    inputs = [("input_ids", token_ids(gen, cfg.vocab_size, 1))]
    outputs = ["logits"]
    for l in range(layers):
        for kind in ("key", "value"):
            inputs.append((f"past_{kind}_{l}", torch.randn(1, kv_heads, past, head_dim, generator=gen)))
    for l in range(layers):
        outputs += [f"present_key_{l}", f"present_value_{l}"]
    return DecodeStep(model, layers), inputs, outputs


def build(name, size, gen):
    if name == "llama":
        return decoder_prefill(llama_config(size, gqa=False), gen)
    if name == "llama_decode":
        return decoder_step(llama_config(size, gqa=False), gen)
    if name == "llama_gqa":
        return decoder_prefill(llama_config(size, gqa=True), gen)
    if name == "qwen2":
        return decoder_prefill(qwen2_config(size), gen)
    if name == "qwen2_decode":
        return decoder_step(qwen2_config(size), gen)
    if name == "gpt2":
        model = transformers.GPT2Model(gpt2_config(size)).eval()
        return LastHidden(model, "input_ids"), [("input_ids", token_ids(gen, model.config.vocab_size, 64))], ["last_hidden_state"]
    if name == "distilbert":
        cfg = (transformers.DistilBertConfig(vocab_size=256, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                             max_position_embeddings=128) if size == "small"
               else transformers.DistilBertConfig())
        model = transformers.DistilBertModel(cfg).eval()
        return LastHidden(model, "input_ids"), [("input_ids", token_ids(gen, cfg.vocab_size, 32))], ["last_hidden_state"]
    if name == "t5_encoder":
        cfg = (transformers.T5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
               if size == "small" else transformers.T5Config())  # t5-small's shape
        model = transformers.T5EncoderModel(cfg).eval()
        return LastHidden(model, "input_ids"), [("input_ids", token_ids(gen, cfg.vocab_size, 32))], ["last_hidden_state"]
    if name == "bart_encoder":
        cfg = (transformers.BartConfig(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                       decoder_ffn_dim=128, max_position_embeddings=128) if size == "small"
               else transformers.BartConfig())  # bart-large's shape
        model = transformers.BartModel(cfg).get_encoder().eval()
        return LastHidden(model, "input_ids"), [("input_ids", token_ids(gen, cfg.vocab_size, 32))], ["last_hidden_state"]
    if name == "hf_vit":
        cfg = (transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=128) if size == "small"
               else transformers.ViTConfig())  # ViT-B/16
        model = transformers.ViTModel(cfg, add_pooling_layer=False).eval()
        pixels = torch.randn(1, 3, cfg.image_size, cfg.image_size, generator=gen)
        return LastHidden(model, "pixel_values"), [("pixel_values", pixels)], ["last_hidden_state"]
    if name == "whisper_encoder":
        cfg = (transformers.WhisperConfig(vocab_size=256, num_mel_bins=16, d_model=64, encoder_layers=2,
                                          encoder_attention_heads=4, decoder_layers=2, decoder_attention_heads=4,
                                          encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=32,
                                          pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
               if size == "small" else transformers.WhisperConfig())  # the defaults: whisper-tiny's shape
        model = transformers.WhisperModel(cfg).get_encoder().eval()
        # The encoder's two convolutions halve the frames: 2 * max_source_positions of them.
        features = torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=gen)
        return LastHidden(model, "input_features"), [("input_features", features)], ["last_hidden_state"]
    if name == "bert_large_layer":
        # BERT-large's layer (hidden 1024, 16 heads, FFN 4096) over 512 positions: issue 27's float16
        # transformer layer (bench/transformer_layer.sh).
        cfg = (transformers.BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=256, num_hidden_layers=1,
                                       attn_implementation="eager") if size == "small"
               else transformers.BertConfig(hidden_size=1024, num_attention_heads=16, intermediate_size=4096,
                                            num_hidden_layers=1, attn_implementation="eager"))
        layer = transformers.models.bert.modeling_bert.BertLayer(cfg).eval()
        hidden = torch.randn(1, 32 if size == "small" else 512, cfg.hidden_size, generator=gen)
        return EncoderLayer(layer), [("hidden_states", hidden)], ["output"]
    raise SystemExit(f"unknown model '{name}'")


NAMES = ["llama", "llama_decode", "llama_gqa", "qwen2", "qwen2_decode", "gpt2", "distilbert", "t5_encoder",
         "bart_encoder", "hf_vit", "whisper_encoder"]
# Exported only when named (--only): bert_large_layer, for bench/transformer_layer.sh.


def write_tensor(path, array, name):
    t = numpy_helper.from_array(np.ascontiguousarray(array), name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def export_one(name, size, dtype, exporter, out_dir):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(INPUT_SEED)
    module, inputs, output_names = build(name, size, gen)
    half = dtype == "float16"
    if half:
        # torch's CPU kernels lack float16 matrix products: the weights and inputs are rounded to
        # float16, the reference is computed in float32 from them, and the float32 export is
        # converted to float16 (onnxconverter-common, as for ONNX Runtime's float16 models).
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                if t.is_floating_point():
                    t.copy_(t.half().float())
        inputs = [(n, t.half().float() if t.is_floating_point() else t) for n, t in inputs]
    args = tuple(t for _, t in inputs)
    with torch.no_grad():
        ref = module(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    model_dir = os.path.join(out_dir, name + ("_dynamo" if exporter == "dynamo" else "") + ("_fp16" if half else ""))
    data_dir = os.path.join(model_dir, "test_data_set_0")
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(model_dir, "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            program = torch.onnx.export(module, args, dynamo=True, input_names=[n for n, _ in inputs],
                                        output_names=output_names, optimize=True, verbose=False)
            program.save(path, external_data=False)
        else:
            torch.onnx.export(module, args, path, opset_version=OPSET, do_constant_folding=True,
                              input_names=[n for n, _ in inputs], output_names=output_names)
    if half:
        from onnxconverter_common import float16
        converted = float16.convert_float_to_float16(onnx.load(path), keep_io_types=False)
        # The converter retypes the output of a Cast to float as float16 but leaves the Cast's
        # `to` at FLOAT (the dynamo export's causal mask): make the Cast say what the graph declares.
        declared = {v.name: v.type.tensor_type.elem_type for v in converted.graph.value_info}
        for n in converted.graph.node:
            if n.op_type == "Cast" and declared.get(n.output[0]) == onnx.TensorProto.FLOAT16:
                for a in n.attribute:
                    if a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                        a.i = onnx.TensorProto.FLOAT16
        onnx.save(converted, path)
    onnx.checker.check_model(path, full_check=True)
    graph_inputs = [i.name for i in onnx.load(path).graph.input]
    as_stored = (lambda a: a.astype(np.float16) if a.dtype == np.float32 else a) if half else (lambda a: a)
    for i, (n, t) in enumerate((n, t) for n, t in inputs if n in graph_inputs):
        write_tensor(os.path.join(data_dir, f"input_{i}.pb"), as_stored(t.numpy()), n)
    for k, (n, t) in enumerate(zip(output_names, ref)):
        write_tensor(os.path.join(data_dir, f"output_{k}.pb"), as_stored(t.numpy()), n)
    print(f"{name} ({size}, {dtype}): {os.path.getsize(path) / 1e6:.2f} MB, inputs {graph_inputs}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", choices=["small", "full"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="")
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    p.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript")
    a = p.parse_args()
    names = a.only.split(",") if a.only else NAMES
    for n in names:
        export_one(n, a.size, a.dtype, a.exporter, a.out)


if __name__ == "__main__":
    main()
