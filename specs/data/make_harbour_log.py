"""Writes harbour-log.jsonl: a needlestack of 400 short, same-shaped log entries, and harbour-questions.jsonl.

Every entry differs from the others in several fields, so a question about one entry has one right answer; the
answers are not guessable from world knowledge. Run from this folder: python make_harbour_log.py (deterministic).
"""

import json
import random

BOATS = [
    "Amber Gull",
    "Blue Heron",
    "Copper Wren",
    "Dawn Tern",
    "Ember Kite",
    "Fern Swift",
    "Grey Plover",
    "Hazel Finch",
    "Iris Petrel",
    "Jade Curlew",
    "Kestrel Rose",
    "Linnet Star",
    "Moss Grebe",
    "Nettle Crane",
    "Opal Shrike",
    "Pine Martin",
    "Quartz Auk",
    "Rowan Teal",
    "Sable Lark",
    "Thistle Rail",
]
GOODS = [
    "figs",
    "salt",
    "wool",
    "tin",
    "cider",
    "slate",
    "hops",
    "rope",
    "pepper",
    "linen",
    "oats",
    "tallow",
    "indigo",
    "walnuts",
    "cork",
    "honey",
    "soap",
    "lamp oil",
    "barley",
    "copper nails",
]
PORTS = ["Porto", "Bergen", "Cardiff", "Genoa", "Tallinn", "Bilbao", "Dundee", "Riga", "Antwerp", "Naples"]
CAPTAINS = [
    "Ada Marsh",
    "Bruno Quill",
    "Clara Vane",
    "Dmitri Holt",
    "Elena Frost",
    "Felix Dunn",
    "Greta Lowe",
    "Hugo Pike",
    "Ines Moor",
    "Jonas Reed",
    "Lara Stone",
    "Mateo Crane",
    "Nadia Birch",
    "Oskar Hale",
]
WEATHER = [
    "in fog",
    "under a clear sky",
    "in a squall",
    "at slack tide",
    "in drizzle",
    "at first light",
    "in a stiff easterly",
    "at dusk",
]


def main() -> None:
    rng = random.Random(20261121)
    seen = set()
    items = []
    while len(items) < 400:
        boat, goods, port = rng.choice(BOATS), rng.choice(GOODS), rng.choice(PORTS)
        if (boat, goods, port) in seen:
            continue
        seen.add((boat, goods, port))
        crates, day = rng.randint(3, 97), rng.randint(1, 28)
        captain, weather = rng.choice(CAPTAINS), rng.choice(WEATHER)
        text = (
            f"Day {day}: the {boat} came in from {port} {weather}, captain {captain}, "
            f"and landed {crates} crates of {goods}."
        )
        items.append(
            {
                "id": f"log-{len(items) + 1:03d}",
                "text": text,
                "boat": boat,
                "goods": goods,
                "port": port,
                "crates": crates,
                "captain": captain,
            }
        )
    with open("harbour-log.jsonl", "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps({"id": item["id"], "text": item["text"]}) + "\n")
    # Questions about entries whose boat+goods pair is unique in the whole log, so the answer is unambiguous.
    pairs: dict[tuple[str, str], int] = {}
    for item in items:
        pairs[item["boat"], item["goods"]] = pairs.get((item["boat"], item["goods"]), 0) + 1
    unique = [i for i in items if pairs[i["boat"], i["goods"]] == 1]
    with open("harbour-questions.jsonl", "w", encoding="utf-8") as fh:
        for item in rng.sample(unique, 6):
            fh.write(
                json.dumps(
                    {
                        "item": item["id"],
                        "question": f"How many crates of {item['goods']} did the {item['boat']} land?",
                        "answer": str(item["crates"]),
                        "alternates": [
                            f"{item['crates']} crates",
                            f"The {item['boat']} landed {item['crates']} crates.",
                        ],
                    }
                )
                + "\n"
            )


if __name__ == "__main__":
    main()
