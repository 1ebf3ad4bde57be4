"""The Spider loader on a small sample in Spider's layout, written by the test."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevo.cli import app
from coevo.envs.base import EnvError
from coevo.envs.check import check_env
from coevo.envs.conversation import expert_trajectory
from coevo.envs.sql import SqlEnv
from coevo.envs.sql.spider import tables_in_query

DATABASES = {
    "concert_singer": [
        "CREATE TABLE stadium (Stadium_ID int PRIMARY KEY, Name text, Capacity int)",
        "CREATE TABLE singer (Singer_ID int PRIMARY KEY, Name text, Country text, Age int)",
        "CREATE TABLE concert (concert_ID int PRIMARY KEY, concert_Name text, Year text, "
        "Stadium_ID int REFERENCES stadium(Stadium_ID))",
        "INSERT INTO stadium VALUES (1, 'Raith', 10104), (2, 'Ayr', 4000), (3, 'Glebe', 3100)",
        "INSERT INTO singer VALUES (1, 'Joe Sharp', 'Netherlands', 52), (2, 'Timbaland', "
        "'United States', 32), (3, 'Justin Brown', 'France', 29), (4, 'Rose White', 'France', 41)",
        "INSERT INTO concert VALUES (1, 'Auditions', '2014', 1), (2, 'Super bootcamp', '2014', 2), "
        "(3, 'Home Visits', '2015', 2)",
    ],
    "pets_1": [
        "CREATE TABLE Student (StuID INTEGER PRIMARY KEY, Fname VARCHAR(12), Age INTEGER)",
        "CREATE TABLE Pets (PetID INTEGER PRIMARY KEY, PetType VARCHAR(20), pet_age INTEGER)",
        "CREATE TABLE Has_Pet (StuID INTEGER, PetID INTEGER)",
        "INSERT INTO Student VALUES (1001, 'Linda', 18), (1002, 'Tracy', 19), (1003, 'Shiela', 21)",
        "INSERT INTO Pets VALUES (2001, 'cat', 3), (2002, 'dog', 2), (2003, 'dog', 1)",
        "INSERT INTO Has_Pet VALUES (1001, 2001), (1002, 2002), (1002, 2003)",
    ],
    "world_1": [
        "CREATE TABLE country (Code char(3) PRIMARY KEY, Name char(52), Continent text, "
        "Population int)",
        "CREATE TABLE city (ID INTEGER PRIMARY KEY, Name char(35), CountryCode char(3))",
        "INSERT INTO country VALUES ('ABW', 'Aruba', 'North America', 103000), ('AFG', "
        "'Afghanistan', 'Asia', 22720000), ('AGO', 'Angola', 'Africa', 12878000)",
        "INSERT INTO city VALUES (1, 'Kabul', 'AFG'), (2, 'Qandahar', 'AFG'), (3, 'Luanda', 'AGO')",
    ],
}
TRAIN = [
    ("concert_singer", "How many singers do we have?", "SELECT count(*) FROM singer"),
    ("concert_singer", "Show name, country, age for all singers ordered by age from the oldest to the youngest.",
     "SELECT name ,  country ,  age FROM singer ORDER BY age DESC"),
    ("concert_singer", "What is the average age of singers from France?",
     "SELECT avg(age) FROM singer WHERE country  =  'France'"),
    ("concert_singer", "Show the stadium name and the number of concerts in each stadium.",
     "SELECT T2.name ,  count(*) FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id  =  "
     "T2.stadium_id GROUP BY T1.stadium_id"),
    ("concert_singer", "Show names of stadiums without any concert.",
     "SELECT name FROM stadium WHERE stadium_id NOT IN (SELECT stadium_id FROM concert)"),
    ("concert_singer", "Which singers are older than 60?", "SELECT name FROM singer WHERE age > 60"),
    ("concert_singer", "Broken gold (missing parenthesis).",
     "SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer"),
    ("pets_1", "How many pets are dogs?", "SELECT count(*) FROM pets WHERE pettype  =  'dog'"),
    ("pets_1", "Find the first name of students who have a dog.",
     "SELECT T1.Fname FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid  =  T2.stuid JOIN pets "
     "AS T3 ON T3.petid  =  T2.petid WHERE T3.pettype  =  'dog'"),
    ("pets_1", "What is the maximum pet age for each pet type?",
     "SELECT max(pet_age) ,  pettype FROM pets GROUP BY pettype"),
    ("pets_1", "Which students have no pets?",
     "SELECT fname FROM student EXCEPT SELECT T1.fname FROM student AS T1 JOIN has_pet AS T2 ON "
     "T1.stuid  =  T2.stuid"),
    ("pets_1", "How many students are older than 20?", "SELECT count(*) FROM student WHERE age > 20"),
]  # fmt: skip
DEV = [
    ("world_1", "What is the name of the most populous country?",
     "SELECT Name FROM country ORDER BY Population DESC LIMIT 1"),
    ("world_1", "How many cities are in Afghanistan?",
     "SELECT count(*) FROM city AS T1 JOIN country AS T2 ON T1.CountryCode = T2.Code WHERE T2.Name = 'Afghanistan'"),
    ("world_1", "List all continents.", "SELECT DISTINCT Continent FROM country"),
    ("concert_singer", "A dev question on a training database.", "SELECT count(*) FROM concert"),
]  # fmt: skip


def write_spider(root: Path, *, with_world_tables: bool = True) -> Path:
    for db_id, statements in DATABASES.items():
        folder = root / "database" / db_id
        folder.mkdir(parents=True)
        conn = sqlite3.connect(folder / f"{db_id}.sqlite")
        for sql in statements:
            conn.execute(sql)
        conn.commit()
        conn.close()
    tables = [
        {"db_id": "concert_singer", "table_names_original": ["stadium", "singer", "concert"]},
        {"db_id": "pets_1", "table_names_original": ["Student", "Has_Pet", "Pets"]},
    ]
    if with_world_tables:
        tables.append({"db_id": "world_1", "table_names_original": ["city", "country"]})
    (root / "tables.json").write_text(json.dumps(tables))
    for name, entries in (("train_spider.json", TRAIN), ("dev.json", DEV)):
        questions = [
            {"db_id": d, "question": q, "query": s, "query_toks": []} for d, q, s in entries
        ]
        (root / name).write_text(json.dumps(questions))
    return root


@pytest.fixture()
def spider(tmp_path: Path) -> Path:
    return write_spider(tmp_path / "spider")


def test_splits_and_skipped_gold(spider: Path):
    env = SqlEnv(data=str(spider))
    train, seen, unseen = (env.tasks(s) for s in ("train", "test_seen", "test_unseen"))
    # 12 training questions: a fifth (2) held out for test_seen; one broken gold is skipped.
    assert len(seen) == 2 and len(train) + len(seen) == 11
    assert sum(env.skipped.values()) == 1
    assert {t.data["db_id"] for t in seen} <= {"concert_singer", "pets_1"}
    # The dev question on a training database is dropped: test_unseen stays unseen.
    assert [t.data["db_id"] for t in unseen] == ["world_1"] * 3
    env.close()


def test_checker_passes_on_the_sample(spider: Path):
    env = SqlEnv(data=str(spider))
    report = check_env(env, tasks_per_split=30)
    assert report.ok, [(r.name, r.problems) for r in report.failures]
    for split in ("train", "test_seen", "test_unseen"):
        for task in env.tasks(split):
            assert expert_trajectory(env, task).reward == 1.0, task.id
    env.close()


def test_cli_check_with_data(spider: Path):
    result = CliRunner().invoke(app, ["env", "check", "sql", "--data", str(spider)])
    assert result.exit_code == 0, result.output
    assert "passed" in result.output


def test_expert_describes_the_tables_the_gold_query_names(tmp_path: Path):
    root = write_spider(tmp_path / "s", with_world_tables=False)
    env = SqlEnv(data=str(root))
    task = next(t for t in env.tasks("test_unseen") if "JOIN" in t.data["query"])
    # world_1 is missing from tables.json: the names come from the database itself.
    assert task.data["tables"] == ["city", "country"]
    actions = [turn.text.split("Action: ", 1)[1] for turn in env.expert(task)]
    assert actions == ["SHOW TABLES", "DESC city", "DESC country", task.data["query"], "submit"]
    env.close()


def test_tables_in_query_handles_aliases_and_case():
    query = "SELECT T1.Fname FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid"
    assert tables_in_query(query, ("Student", "Has_Pet", "Pets")) == ["Student", "Has_Pet"]


def test_layout_problems_get_clear_errors(tmp_path: Path):
    with pytest.raises(EnvError, match=r"tables\.json is missing"):
        SqlEnv(data=str(tmp_path))
    root = write_spider(tmp_path / "broken")
    (root / "dev.json").write_text("{not json")
    with pytest.raises(EnvError, match=r"dev\.json.*not valid JSON"):
        SqlEnv(data=str(root))
    root = write_spider(tmp_path / "nodb")
    (root / "database" / "pets_1" / "pets_1.sqlite").unlink()
    with pytest.raises(EnvError, match=r"database/<db_id>/<db_id>\.sqlite"):
        SqlEnv(data=str(root))
    root = write_spider(tmp_path / "corrupt")
    (root / "database" / "pets_1" / "pets_1.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(EnvError, match="cannot be opened as a SQLite database"):
        SqlEnv(data=str(root))
    root = write_spider(tmp_path / "noquery")
    (root / "train_spider.json").write_text(json.dumps([{"db_id": "pets_1", "question": "?"}]))
    with pytest.raises(EnvError, match="entry 0 lacks"):
        SqlEnv(data=str(root))
