"""A tiny random-weight sentence-transformers model (BERT, hidden 32, 2 layers) and its data.

Built in code with a word-level tokenizer, saved as a real sentence-transformers folder, so the
`sentence-transformers` encoder and the trainer load it exactly as they load MiniLM.
"""

from __future__ import annotations

import json
from pathlib import Path

TOPICS = {
    "termination": "contract party shall terminate notice breach cure period agreement",
    "payment": "invoice payment fee due days late interest amount currency",
    "pressure": "patient blood pressure dose trial measure clinic reading",
    "pump": "device pump valve manual infusion flow alarm battery",
    "warranty": "warranty defect repair replace supplier goods months claim",
    "privacy": "data personal privacy consent record breach notify authority",
}
FILLER = "the a of and to in is on for with this that by be as it"
WORDS = sorted({w for text in TOPICS.values() for w in text.split()} | set(FILLER.split()))
WORDS += ["section", "introduction", "scope", "notes", "summary", "heading", "clause"]


def build_tiny_st(folder: Path) -> Path:
    """Write a sentence-transformers folder (Transformer -> mean Pooling -> Normalize)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate([*specials, *sorted(set(WORDS))])}
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    raw.normalizer = normalizers.Lowercase()
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=64,
    )  # fmt: skip
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=128,
    )  # fmt: skip
    bert_dir = folder.parent / (folder.name + "-bert")
    BertModel(config).save_pretrained(str(bert_dir))
    tokenizer.save_pretrained(str(bert_dir))
    first = Transformer(str(bert_dir), max_seq_length=48)
    model = SentenceTransformer(modules=[first, Pooling(32, "mean"), Normalize()], device="cpu")
    model.save(str(folder), create_model_card=False)
    return folder


def topic_text(topic: str, n: int = 3, offset: int = 0) -> str:
    """A few sentences of one topic's words (deterministic)."""
    words = TOPICS[topic].split()
    sentences = []
    for i in range(n):
        picked = [words[(offset + i + j * 3) % len(words)] for j in range(7)]
        sentences.append(f"The {' '.join(picked)} is in this {picked[0]}.")
    return " ".join(sentences)


def write_pairs(path: Path, n_per_topic: int = 6) -> Path:
    """A JSONL file of (topic query, topic passage) pairs."""
    with path.open("w") as out:
        for topic, words in TOPICS.items():
            for i in range(n_per_topic):
                query = " ".join(words.split()[i % 4 : i % 4 + 3])
                out.write(json.dumps({"query": query, "positive": topic_text(topic, 3, i)}) + "\n")
    return path


def write_beir(folder: Path) -> Path:
    """A small BEIR folder: one document per (topic, variant); queries with a train/test split."""
    folder.mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w") as out:
        for topic in TOPICS:
            for v in range(3):
                doc = {"_id": f"{topic}-{v}", "title": "", "text": topic_text(topic, 8, v)}
                out.write(json.dumps(doc) + "\n")
    qrels = ["query-id\tcorpus-id\tscore"]
    with (folder / "queries.jsonl").open("w") as out:
        for t, (topic, words) in enumerate(TOPICS.items()):
            for i in range(4):
                qid = f"q{t}-{i}"
                split = "test" if i == 3 else "train"
                text = " ".join(words.split()[i : i + 3])
                out.write(json.dumps({"_id": qid, "text": text, "split": split}) + "\n")
                qrels.append(f"{qid}\t{topic}-{i % 3}\t1")
    (folder / "qrels.tsv").write_text("\n".join(qrels) + "\n")
    return folder


def write_documents(folder: Path) -> Path:
    """Markdown documents with headings (one per topic pair) and no labels."""
    folder.mkdir(parents=True)
    names = list(TOPICS)
    for d in range(4):
        parts = [f"# {names[d]} {names[d + 1]} notes", "", topic_text(names[d], 2, d), ""]
        for topic in (names[d], names[d + 1], names[(d + 2) % len(names)]):
            parts += [f"## {topic} clause", "", topic_text(topic, 6, d), ""]
        (folder / f"doc{d}.md").write_text("\n".join(parts))
    return folder
