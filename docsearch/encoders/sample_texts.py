"""A small built-in sample of text that calibrations run on, the same on every machine.

`SENTENCES`: short texts across the domains docsearch serves (contracts and judgments, clinical
studies, manuals, papers, meetings, news, questions). `windows` joins them into texts long enough
to fill an encoder's window, for calibrations whose statistics depend on position (int8.py).
Not here: what each calibration measures (intrinsic_dim.py, int8.py, precision.py).
"""

from __future__ import annotations

SENTENCES: tuple[str, ...] = (
    "The lessee shall pay the rent on the first business day of each calendar month.",
    "Either party may terminate this agreement with ninety days written notice to the other.",
    "The court held that the arbitration clause was unenforceable against the consumer.",
    "Confidential information does not include information already in the public domain.",
    "The licensor grants a non-exclusive, worldwide licence to use the software internally.",
    "Damages are limited to the fees paid in the twelve months before the claim arose.",
    "The appellant argued that the trial judge misdirected the jury on the burden of proof.",
    "This agreement is governed by the laws of the State of New York.",
    "Patients were randomised to receive either the study drug or a matching placebo.",
    "The primary endpoint was overall survival at twenty-four months after enrolment.",
    "Adverse events were more frequent in the higher dose group than in the control group.",
    "Serum creatinine rose steadily during the first week of treatment.",
    "The cohort included 1,204 adults with type 2 diabetes followed for five years.",
    "Vitamin D supplementation did not reduce the incidence of fractures in older women.",
    "Inflammation of the airways is a hallmark of chronic asthma.",
    "The mutation disrupts the binding site of the transcription factor.",
    "Tighten the four mounting bolts to 25 newton metres in a diagonal pattern.",
    "Disconnect the power supply before opening the control cabinet.",
    "The pump delivers 40 litres per minute at a head of twelve metres.",
    "If the error light flashes twice, reset the controller and check the sensor cable.",
    "The bridge deck is supported by prestressed concrete girders spaced two metres apart.",
    "Firmware version 3.2 adds support for the new temperature probe.",
    "Replace the air filter every 500 operating hours or once a year.",
    "The valve must be inspected for corrosion before each pressure test.",
    "We propose a neural network that learns sentence embeddings without labelled data.",
    "Our parser improves dependency accuracy on low-resource languages.",
    "The model is trained with a contrastive loss over in-batch negatives.",
    "Results on the benchmark show a gain of three points over the previous best system.",
    "Attention weights reveal which input tokens the decoder relies on.",
    "We release the dataset of annotated dialogues under an open licence.",
    "Machine translation quality degrades sharply on out-of-domain text.",
    "The algorithm runs in linear time in the length of the input string.",
    "The committee agreed to postpone the budget decision until the next meeting.",
    "Marketing reported that the new product launch exceeded its sales target.",
    "The project manager asked the team to finish the user interface by Friday.",
    "We discussed whether the remote control should include a voice recogniser.",
    "Quarterly revenue grew by eight percent compared with the same period last year.",
    "The board approved the merger subject to regulatory clearance.",
    "Staff raised concerns about the new shift schedule at the hospital.",
    "The school district will hire forty additional teachers this autumn.",
    "Heavy rain caused the river to burst its banks overnight.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "The museum reopened after a two-year renovation of its east wing.",
    "A small cafe on the corner serves the best coffee in town.",
    "The train to the airport leaves every fifteen minutes.",
    "She finished the marathon in just under four hours.",
    "The old lighthouse has guided ships along this coast for a century.",
    "Migratory birds stop at the wetland to rest and feed in spring.",
    "How long does the warranty last on refurbished laptops?",
    "What are the side effects of long-term steroid use?",
    "Which clause covers termination for convenience?",
    "Does the new regulation apply to small businesses?",
    "Who is liable when an autonomous vehicle causes an accident?",
    "Is there evidence that exercise improves memory in older adults?",
    "How do I calibrate the pressure sensor after replacing it?",
    "What methods reduce hallucination in large language models?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The central bank raised interest rates to curb inflation.",
    "Volcanic ash can disrupt air travel across an entire continent.",
    "The novel follows three generations of a family in a fishing village.",
    "Encryption keys must be rotated at least once every ninety days.",
    "The survey found that most respondents preferred working from home two days a week.",
    "Groundwater levels have fallen steadily over the past decade.",
    "The treaty was signed by twelve nations in the capital last spring.",
)


def windows(count: int = 8, characters: int = 1500) -> list[str]:
    """`count` texts of about `characters` characters, each the sentences in another order
    (stride 7 over the 64 sentences), so that every sentence appears at several positions."""
    n = len(SENTENCES)
    texts = [" ".join(SENTENCES[(i * 7 + j) % n] for j in range(n)) for i in range(count)]
    return [text[:characters] for text in texts]
