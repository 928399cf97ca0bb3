"""Synthetic memories for the consolidation tests and timing: facts each restated in a few wordings (clusters),
among one-off notes. Deterministic for a seed. Not LoCoMo or any benchmark's data."""

from __future__ import annotations

import random

SERVICES = ["billing", "search", "auth", "ledger", "mailer", "scheduler", "thumbnailer", "gateway", "exporter",
            "indexer", "notifier", "archiver", "payments", "inventory", "reports", "metrics", "uploader", "profile"]
HOSTS = ["kestrel", "osprey", "heron", "plover", "curlew", "dunlin", "merlin", "shrike", "siskin", "linnet"]
TEAMS = ["platform", "data", "mobile", "growth", "security", "infra", "design", "support", "research", "finance"]
PEOPLE = ["Ada", "Bram", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemal", "Lena"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
TOOLS = ["Postgres", "SQLite", "Redis", "Kafka", "nginx", "Grafana", "MinIO", "Caddy", "RabbitMQ", "ClickHouse"]

# Each kind: wordings of one fact (the same slots filled the same way make one cluster).
KINDS = [
    ["The {svc} service runs on port {port} on host {host}.",
     "{svc} listens on port {port}; it is deployed on {host}.",
     "Port {port} on {host} serves the {svc} service.",
     "We run the {svc} service on {host}, port {port}."],
    ["The {team} team meets every {day} at {hour} to plan the week.",
     "Every {day} at {hour} the {team} team has its planning meeting.",
     "{team} team planning happens on {day}s at {hour}."],
    ["{person} owns the {svc} codebase and reviews its changes.",
     "Changes to the {svc} code are reviewed by {person}, who owns it.",
     "The owner of the {svc} codebase is {person}; ask them for reviews."],
    ["The {svc} service stores its data in {tool} on {host}.",
     "{svc} keeps its data in a {tool} database on {host}.",
     "On {host}, {tool} holds the data of the {svc} service."],
]
NOISE = ["The coffee machine on floor {n} needs descaling.", "Ticket {n} was closed as a duplicate.",
         "Remember to rotate the key labelled K{n} before spring.", "Invoice {n} is waiting for approval by {person}.",
         "The {team} offsite is booked for week {n}.", "Printer {n} jams when duplex is on.",
         "{person} is on leave in week {n}.", "The training budget for {team} is {n} euros."]


def cluster_texts(rng: random.Random, size: int) -> list[str]:
    """`size` wordings of one random fact (wordings repeat when size exceeds a kind's count, with a suffix)."""
    kind = rng.choice(KINDS)
    slots = {"svc": rng.choice(SERVICES), "port": rng.randrange(2000, 9999), "host": rng.choice(HOSTS),
             "team": rng.choice(TEAMS), "day": rng.choice(DAYS), "hour": f"{rng.randrange(8, 17)}:00",
             "person": rng.choice(PEOPLE), "tool": rng.choice(TOOLS)}
    texts = [template.format(**slots) for template in kind]
    rng.shuffle(texts)
    notes = ["", " Noted in standup.", " Confirmed again.", " Still true."]
    return [texts[i % len(texts)] + notes[(i // len(texts)) % len(notes)] for i in range(size)]


def noise_text(rng: random.Random, n: int) -> str:
    return rng.choice(NOISE).format(n=n, person=rng.choice(PEOPLE), team=rng.choice(TEAMS))


def synthetic_memories(count: int, seed: int = 7, clustered: float = 0.6) -> list[str]:
    """`count` texts: about `clustered` of them in clusters of 3-6 wordings, the rest one-off notes, shuffled
    so a cluster's members are spread over time."""
    rng = random.Random(seed)
    texts: list[str] = []
    while len(texts) < count * clustered:
        texts.extend(cluster_texts(rng, rng.randrange(3, 7)))
    n = 0
    while len(texts) < count:
        texts.append(noise_text(rng, n))
        n += 1
    texts = texts[:count]
    rng.shuffle(texts)
    return texts
