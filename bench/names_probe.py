"""Plain user notes, written for this check (not from any dataset): does the name rule of #38 cost answers?

Each answerable question writes a capitalised word its note never holds ("Christmas" for a ski trip in
December, "Dr. Patel" for a dental checkup), the case the rule could wrongly abstain on; each unanswerable
one asks about a person the notes never mention. 27 notes: above the rule's small-scope exemption.

Usage::

    python bench/names_probe.py [none|minilm|fake|shifted:minilm ...]   # one line of JSON per embedder
"""

import json
import os
import sys
import tempfile

import memlane

notes = {
    "xmas": "Holiday plan: ski trip to the Alps from December 23 to 30, booked the chalet",
    "flight": "Flight JL 7 to Japan departs Friday at 9:40 from terminal 2",
    "standup": "For the standup I need to prepare the sprint burndown chart",
    "mom": "My mother loves tulips, especially the yellow ones",
    "keys": "The car keys are in the blue bowl by the front door",
    "report": "The product manager asked for churn numbers in the quarterly report",
    "wifi": "Rental apartment wifi password is sunflower42",
    "workshop": "The programming workshop covered decorators and generators",
    "dentist": "Dental checkup moved to the 14th at 3pm, bring the insurance card",
    "sister": "My sister is getting married in Lisbon next June",
    "gym": "Gym routine: squats, deadlifts and rowing on Tuesdays and Thursdays",
    "groceries": "Need to buy oat milk, spinach, eggs and coffee beans",
    "book": "Currently reading a novel about a lighthouse keeper",
    "plants": "Water the fern every three days and the cactus once a month",
    "bike": "Bike tyre pressure should be 80 psi, the pump is in the garage",
    "tax": "Tax return deadline is the end of April, receipts are in the green folder",
    "recipe": "Pancake recipe: two eggs, a cup of flour, a cup of milk, pinch of salt",
    "cat": "The cat hides under the bed when the vacuum cleaner runs",
    "car": "Car service is due at 60,000 km, last oil change was in March",
    "neighbour": "The neighbour's dog barks at the mail carrier every morning",
    "piano": "Piano lessons every Wednesday at 5, practise scales daily",
    "budget": "Monthly budget: rent 1200, food 400, transport 150",
    "podcast": "Favourite podcast episode was about the history of maps",
    "garden": "Plant tomatoes after the last frost, usually mid May",
    "insurance": "Home insurance renews in September, compare quotes first",
    "password": "Use the password manager for every new account",
    "coffee": "Coffee grinder setting 14 works best for the pour-over",
}
answerable = [
    ("What are my plans for Christmas?", "xmas"),
    ("When is my flight to Tokyo?", "flight"),
    ("What do I need to prepare for the Monday standup?", "standup"),
    ("What flowers does Mom like?", "mom"),
    ("Where are the Honda keys?", "keys"),
    ("What does the PM want in the Q3 report?", "report"),
    ("What's the wifi password at the Airbnb?", "wifi"),
    ("What did the Python workshop cover?", "workshop"),
    ("When is my appointment with Dr. Patel?", "dentist"),
    ("Where is Emma's wedding?", "sister"),
    ("Which days do I go to the Fitness First gym?", "gym"),
    ("What should I buy at Tesco?", "groceries"),
    ("How often do I water the plants from IKEA?", "plants"),
    ("When is my Volvo due for a service?", "car"),
    ("When do I have lessons with Mrs. Chen?", "piano"),
]
unanswerable = [
    "When did Maya go hiking?",
    "What is Jonathan's phone number?",
    "Where does Priya work?",
    "What did Carlos say about the merger?",
    "How old is Grandpa Joe?",
]


def run(embedder: str) -> dict[str, object]:
    """Found and abstained counts for one embedder (``none``: words only)."""
    with tempfile.TemporaryDirectory() as d:
        m = memlane.open(os.path.join(d, "p.db"), embedder=None if embedder == "none" else embedder, indexing="sync")
        try:
            # neutral keys: a key that repeats a question's word ("mom") would answer it through the address
            address = {label: f"note-{n:02d}" for n, label in enumerate(notes)}
            for label, text in notes.items():
                m.put("user/1/notes", address[label], text)
            missed = [
                q
                for q, label in answerable
                if address[label] not in [h.key for h in m.recall(q, namespace_prefix="user/1").hits]
            ]
            abstained = sum(m.recall(q, namespace_prefix="user/1").status == "nothing_relevant" for q in unanswerable)
        finally:
            m.close()
    return {
        "embedder": embedder,
        "found": f"{len(answerable) - len(missed)}/{len(answerable)}",
        "abstained": f"{abstained}/{len(unanswerable)}",
        "missed": missed,
    }


if __name__ == "__main__":
    for name in sys.argv[1:] or ["none", "minilm"]:
        print(json.dumps(run(name)))
