"""Join templates: 2-table joins over one foreign key and 3-table joins over two.

A foreign key carries a role name (a flight's "departure airport"), so one template phrases
every schema's joins; 3-table joins cover link tables (A <- B -> C), chains (C -> B -> A) and
two children of one parent (X -> P <- Y).
"""

from __future__ import annotations

from collections.abc import Iterator

from coevo.envs.sql.questions import Candidate, Values, a, lit
from coevo.envs.sql.schemas import Column, Schema, Table


def join_templates(P: Table, C: Table, f: Column, v: Values) -> Iterator[Candidate]:
    """Templates over one foreign key: child C points at parent P in the role `f.phrase`."""
    R, pk = f.phrase, P.pk.name
    both = (C.name, P.name)
    j = f"{C.name} JOIN {P.name} ON {C.name}.{f.name} = {P.name}.{pk}"
    PL, CL = P.label, C.label
    cnums = C.kind("int", "real", "year")
    # "owners that have a pet", but "airports that are the departure airport of a flight".
    own = P.noun == R
    if PL:
        pl = f"{P.name}.{PL.name}"
        yield Candidate(
            f"How many {C.plural} does each {R} have? List the {R}'s {PL.phrase} and the count.",
            f"SELECT {pl}, COUNT(*) FROM {j} GROUP BY {C.name}.{f.name}",
            both,
            "join_group",
        )
        k = v.median_group(f"SELECT COUNT(*) FROM {C.name} GROUP BY {f.name}")
        yield Candidate(
            f"Which {P.plural} have at least {k} {C.plural}? List their {PL.plural}."
            if own
            else f"Which {P.plural} are the {R} of at least {k} {C.plural}? List their {PL.plural}.",
            f"SELECT {pl} FROM {j} GROUP BY {C.name}.{f.name} HAVING COUNT(*) >= {k}",
            both,
            "join_having",
        )
        top = f"FROM {j} GROUP BY {C.name}.{f.name} ORDER BY COUNT(*) DESC"
        yield Candidate(
            f"What is the {PL.phrase} of the {R} with the most {C.plural}?",
            f"SELECT {pl} {top} LIMIT 1",
            both,
            "join_order",
            f"SELECT COUNT(*) {top} LIMIT 2",
        )
        yield Candidate(
            f"List the {PL.plural} of {P.plural} that have no {C.plural}."
            if own
            else f"List the {PL.plural} of {P.plural} that are not the {R} of any {C.noun}.",
            f"SELECT {PL.name} FROM {P.name} WHERE {pk} NOT IN (SELECT {f.name} FROM {C.name})",
            (P.name, C.name),
            "subquery",
        )
        if CL:
            yield Candidate(
                f"Show the {CL.plural} of all {C.plural} together with the {PL.phrase} of their {R}.",
                f"SELECT {C.name}.{CL.name}, {pl} FROM {j}",
                both,
                "join",
            )
        for n in cnums:
            for x in v.thresholds(C.name, n.name)[1:]:
                yield Candidate(
                    f"List the {PL.plural} of {P.plural} that "
                    + (f"have {a(C.noun)}" if own else f"are the {R} of some {C.noun}")
                    + " with "
                    f"{n.phrase} above {x}.",
                    f"SELECT {PL.name} FROM {P.name} WHERE {pk} IN "
                    f"(SELECT {f.name} FROM {C.name} WHERE {n.name} > {x})",
                    (P.name, C.name),
                    "subquery",
                )
            yield Candidate(
                f"For each {R}, what is the average {n.phrase} of its {C.plural}? List the "
                f"{PL.phrase} and the average.",
                f"SELECT {pl}, AVG({C.name}.{n.name}) FROM {j} GROUP BY {C.name}.{f.name}",
                both,
                "join_group",
            )
        for x in v.pick(P.name, PL.name, 2):
            yield Candidate(
                f"How many {C.plural} have the {R} {lit(x)}?",
                f"SELECT COUNT(*) FROM {j} WHERE {pl} = {lit(x)}",
                both,
                "join",
            )
            if CL:
                yield Candidate(
                    f"List the {CL.plural} of {C.plural} whose {R} is {lit(x)}.",
                    f"SELECT {C.name}.{CL.name} FROM {j} WHERE {pl} = {lit(x)}",
                    both,
                    "join",
                )
    for c in P.kind("cat"):
        for x in v.pick(P.name, c.name, 2):
            where = f"WHERE {P.name}.{c.name} = {lit(x)}"
            if CL:
                yield Candidate(
                    f"List the {CL.plural} of {C.plural} whose {R} has {c.phrase} {lit(x)}.",
                    f"SELECT {C.name}.{CL.name} FROM {j} {where}",
                    both,
                    "join",
                )
            for n in cnums:
                yield Candidate(
                    f"What is the average {n.phrase} of {C.plural} whose {R} has {c.phrase} {lit(x)}?",
                    f"SELECT AVG({C.name}.{n.name}) FROM {j} {where}",
                    both,
                    "join",
                )
                if CL and C.pk:
                    yield Candidate(
                        f"List the {CL.plural} of {C.plural} whose {R} has {c.phrase} {lit(x)}, "
                        f"from the highest {n.phrase} to the lowest.",
                        f"SELECT {C.name}.{CL.name} FROM {j} {where} ORDER BY "
                        f"{C.name}.{n.name} DESC, {C.name}.{C.pk.name}",
                        both,
                        "join_order",
                    )
    if CL:
        for n in P.kind("int", "real", "year"):
            for x in v.thresholds(P.name, n.name)[:1]:
                yield Candidate(
                    f"List the {CL.plural} of {C.plural} whose {R} has {a(n.phrase)} above {x}.",
                    f"SELECT {C.name}.{CL.name} FROM {j} WHERE {P.name}.{n.name} > {x}",
                    both,
                    "join",
                )


def three_table_templates(s: Schema, v: Values) -> Iterator[Candidate]:
    """3-table joins: link tables (A <- B -> C), chains (C -> B -> A), siblings (X -> P <- Y)."""
    for B in s.tables:
        fks = B.kind("fk")
        for fa in fks:
            for fc in fks:
                A, C = s.table(fa.ref), s.table(fc.ref)
                if fa is fc or A is C or not (A.label and C.label):
                    continue
                j = (
                    f"{B.name} JOIN {A.name} ON {B.name}.{fa.name} = {A.name}.{A.pk.name} "
                    f"JOIN {C.name} ON {B.name}.{fc.name} = {C.name}.{C.pk.name}"
                )
                al, cl, tabs = (
                    f"{A.name}.{A.label.name}",
                    f"{C.name}.{C.label.name}",
                    (B.name, A.name, C.name),
                )
                yield Candidate(
                    f"For every {B.noun}, list the {A.label.phrase} of its {fa.phrase} and the "
                    f"{C.label.phrase} of its {fc.phrase}.",
                    f"SELECT {al}, {cl} FROM {j}",
                    tabs,
                    "join3",
                )
                for x in v.pick(C.name, C.label.name, 2):
                    yield Candidate(
                        f"List the {A.label.plural} of the {A.plural} that have {a(B.noun)} with "
                        f"the {fc.phrase} {lit(x)}.",
                        f"SELECT {al} FROM {j} WHERE {cl} = {lit(x)}",
                        tabs,
                        "join3",
                    )
                for c in C.kind("cat"):
                    for x in v.pick(C.name, c.name, 2):
                        yield Candidate(
                            f"List the distinct {A.label.plural} of {A.plural} that have {a(B.noun)} "
                            f"with {a(fc.phrase)} whose {c.phrase} is {lit(x)}.",
                            f"SELECT DISTINCT {al} FROM {j} WHERE {C.name}.{c.name} = {lit(x)}",
                            tabs,
                            "join3",
                        )
                for c in A.kind("cat"):
                    for x in v.pick(A.name, c.name, 1):
                        yield Candidate(
                            f"For each {fc.phrase}, how many {B.plural} involve {a(fa.phrase)} whose "
                            f"{c.phrase} is {lit(x)}? List the {C.label.phrase} and the count.",
                            f"SELECT {cl}, COUNT(*) FROM {j} WHERE {A.name}.{c.name} = {lit(x)} "
                            f"GROUP BY {B.name}.{fc.name}",
                            tabs,
                            "join3",
                        )
        for fb in fks:  # chains: C -> B (via fc) -> A (via fb)
            A = s.table(fb.ref)
            for C in s.tables:
                for fc in (f for f in C.kind("fk") if f.ref == B.name):
                    if C is A or C is B or not A.label or not B.pk:
                        continue
                    j = (
                        f"{C.name} JOIN {B.name} ON {C.name}.{fc.name} = {B.name}.{B.pk.name} "
                        f"JOIN {A.name} ON {B.name}.{fb.name} = {A.name}.{A.pk.name}"
                    )
                    tabs, al, whose = (
                        (C.name, B.name, A.name),
                        f"{A.name}.{A.label.name}",
                        f"{fc.phrase}'s {fb.phrase}",
                    )
                    yield Candidate(
                        f"For each {fb.phrase}, how many {C.plural} are there through their {B.plural}? "
                        f"List the {A.label.phrase} and the count.",
                        f"SELECT {al}, COUNT(*) FROM {j} GROUP BY {B.name}.{fb.name}",
                        tabs,
                        "join3",
                    )
                    for x in v.pick(A.name, A.label.name, 2):
                        yield Candidate(
                            f"How many {C.plural} have {a(fc.phrase)} whose {fb.phrase} is {lit(x)}?",
                            f"SELECT COUNT(*) FROM {j} WHERE {al} = {lit(x)}",
                            tabs,
                            "join3",
                        )
                    for c in A.kind("cat"):
                        for x in v.pick(A.name, c.name, 2):
                            where = f"WHERE {A.name}.{c.name} = {lit(x)}"
                            for n in C.kind("int", "real", "year"):
                                yield Candidate(
                                    f"What is the average {n.phrase} of {C.plural} whose {whose} has "
                                    f"{c.phrase} {lit(x)}?",
                                    f"SELECT AVG({C.name}.{n.name}) FROM {j} {where}",
                                    tabs,
                                    "join3",
                                )
                            if C.label:
                                yield Candidate(
                                    f"List the {C.label.plural} of {C.plural} whose {whose} has "
                                    f"{c.phrase} {lit(x)}.",
                                    f"SELECT {C.name}.{C.label.name} FROM {j} {where}",
                                    tabs,
                                    "join3",
                                )
        for fx in fks:  # siblings: B -> P <- Y
            P = s.table(fx.ref)
            for Y in s.tables:
                for fy in (f for f in Y.kind("fk") if f.ref == P.name and Y is not B):
                    if not B.label:
                        continue
                    j = (
                        f"{B.name} JOIN {P.name} ON {B.name}.{fx.name} = {P.name}.{P.pk.name} "
                        f"JOIN {Y.name} ON {Y.name}.{fy.name} = {P.name}.{P.pk.name}"
                    )
                    for c in Y.kind("cat"):
                        for x in v.pick(Y.name, c.name, 2):
                            yield Candidate(
                                f"List the distinct {B.label.plural} of {B.plural} whose {fx.phrase} is "
                                f"also the {fy.phrase} of {a(Y.noun)} with {c.phrase} {lit(x)}.",
                                f"SELECT DISTINCT {B.name}.{B.label.name} FROM {j} WHERE "
                                f"{Y.name}.{c.name} = {lit(x)}",
                                (B.name, P.name, Y.name),
                                "join3",
                            )
