"""The generated databases' schemas: 14 Spider-like domains, each described once as data.

A schema says what the generator fills (kinds of columns, value ranges, vocabularies) and what
the question templates need to talk about it (singular/plural nouns, column phrases, how a row
refers to the row its foreign key points at). Four domains are kept out of training
(`UNSEEN`), so `test_unseen` asks about schemas the agent has never seen.
"""

from __future__ import annotations

from dataclasses import dataclass

# Column kinds: "pk" integer key 1..n; "label" unique display text (style picks the pool);
# "cat" text from `values`; "int" / "real" / "year" numbers in [lo, hi]; "fk" a key of `ref`.
KINDS = ("pk", "label", "cat", "int", "real", "year", "fk")


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    phrase: str = ""
    """How a question names the column ("opening year"); fk: the role of the row it points at."""
    values: tuple[str, ...] = ()
    lo: float = 0
    hi: float = 0
    style: str = ""
    """label pool: person, title, org, place, country, subject, pet, code."""
    suffixes: tuple[str, ...] = ()
    ref: str = ""

    @property
    def plural(self) -> str:
        return pluralize(self.phrase)


@dataclass(frozen=True)
class Table:
    name: str
    noun: str
    plural: str
    rows: int
    columns: tuple[Column, ...]

    def kind(self, *kinds: str) -> list[Column]:
        return [c for c in self.columns if c.kind in kinds]

    @property
    def pk(self) -> Column | None:
        return next((c for c in self.columns if c.kind == "pk"), None)

    @property
    def label(self) -> Column | None:
        return next((c for c in self.columns if c.kind == "label"), None)


@dataclass(frozen=True)
class Schema:
    db_id: str
    tables: tuple[Table, ...]

    def table(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)


def pluralize(word: str) -> str:
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    return word + "s"


def pk(name: str) -> Column:
    return Column(name, "pk", "id")


def label(name: str, style: str, phrase: str = "name", *suffixes: str) -> Column:
    return Column(name, "label", phrase, style=style, suffixes=suffixes)


def cat(name: str, phrase: str, *values: str) -> Column:
    return Column(name, "cat", phrase, values=values)


def num(name: str, phrase: str, lo: float, hi: float, kind: str = "int") -> Column:
    return Column(name, kind, phrase, lo=lo, hi=hi)


def fk(name: str, ref: str, role: str) -> Column:
    return Column(name, "fk", role, ref=ref)


CITIES = ("Berlin", "Lisbon", "Osaka", "Toronto", "Lagos", "Lima", "Oslo", "Perth", "Austin",
          "Dublin", "Seoul", "Cairo", "Quito", "Nairobi", "Porto", "Kyoto")  # fmt: skip
NATIONS = ("France", "Japan", "Brazil", "Canada", "Kenya", "Italy", "Mexico", "Norway",
           "India", "Chile", "Spain", "Egypt")  # fmt: skip
YES_NO = ("T", "F")

SCHEMAS: tuple[Schema, ...] = (
    Schema("concert_singer", (
        Table("stadium", "stadium", "stadiums", 20, (
            pk("stadium_id"), label("name", "place", "name", "Stadium", "Arena", "Park"),
            cat("location", "location", *CITIES[:8]), num("capacity", "capacity", 2000, 60000),
            num("opening_year", "opening year", 1950, 2015, "year"))),
        Table("singer", "singer", "singers", 40, (
            pk("singer_id"), label("name", "person"), cat("country", "country", *NATIONS[:7]),
            num("age", "age", 18, 70), cat("genre", "genre", "pop", "rock", "jazz", "folk", "soul"))),
        Table("concert", "concert", "concerts", 50, (
            pk("concert_id"), label("concert_name", "title", "concert name"),
            cat("theme", "theme", "Free choice", "Party", "Wide awake", "Happy tonight", "Classics"),
            fk("stadium_id", "stadium", "stadium"), num("year", "year", 2010, 2023, "year"))),
        Table("singer_in_concert", "appearance", "appearances", 120, (
            fk("concert_id", "concert", "concert"), fk("singer_id", "singer", "singer"))),
    )),
    Schema("college", (
        Table("department", "department", "departments", 18, (
            pk("dept_id"), label("dept_name", "subject", "department name"),
            cat("building", "building", "Watson", "Taylor", "Painter", "Packard", "Garfield"),
            num("budget", "budget", 50000, 900000, "real"))),
        Table("instructor", "instructor", "instructors", 45, (
            pk("instructor_id"), label("name", "person"), fk("dept_id", "department", "department"),
            num("salary", "salary", 40000, 130000),
            cat("rank", "rank", "Lecturer", "Assistant", "Associate", "Professor"))),
        Table("student", "student", "students", 80, (
            pk("student_id"), label("name", "person"), fk("dept_id", "department", "department"),
            num("tot_cred", "total credits", 0, 150), num("year_enrolled", "enrolment year", 2012, 2023, "year"))),
        Table("advisor", "advising relationship", "advising relationships", 60, (
            fk("student_id", "student", "student"), fk("instructor_id", "instructor", "instructor"))),
    )),
    Schema("film_market", (
        Table("film", "film", "films", 40, (
            pk("film_id"), label("title", "title", "title"),
            cat("studio", "studio", "Paramount", "Columbia", "Universal", "Orion", "Miramax"),
            cat("director", "director", "Ann Reyes", "Bo Tanaka", "Cy Novak", "Di Osei", "Ed Lund"),
            num("gross_in_dollar", "gross in dollars", 1000000, 90000000))),
        Table("market", "market", "markets", 14, (
            pk("market_id"), label("country", "country", "country"),
            num("number_cities", "number of cities", 5, 500))),
        Table("film_market_estimation", "estimate", "estimates", 110, (
            pk("estimation_id"), fk("film_id", "film", "film"), fk("market_id", "market", "market"),
            num("low_estimate", "low estimate", 1000, 50000, "real"),
            num("year", "year", 1990, 2000, "year"))),
    )),
    Schema("movie_rating", (
        Table("movie", "movie", "movies", 40, (
            pk("mid"), label("title", "title", "title"), num("year", "release year", 1960, 2022, "year"),
            cat("director", "director", "Lee Park", "Sam Ortiz", "Ida Berg", "Max Cole", "Ora Diaz"))),
        Table("reviewer", "reviewer", "reviewers", 22, (
            pk("rid"), label("name", "person"), cat("country", "country", *NATIONS[:6]))),
        Table("rating", "rating", "ratings", 130, (
            fk("rid", "reviewer", "reviewer"), fk("mid", "movie", "movie"),
            num("stars", "stars", 1, 5), num("rating_year", "rating year", 2015, 2023, "year"))),
    )),
    Schema("gymnast", (
        Table("people", "person", "people", 45, (
            pk("people_id"), label("name", "person"), num("age", "age", 16, 35),
            num("height", "height", 1.45, 1.95, "real"), cat("hometown", "hometown", *CITIES[4:12]))),
        Table("gymnast", "gymnast", "gymnasts", 30, (
            pk("gymnast_id"), fk("people_id", "people", "person"),
            num("floor_points", "floor exercise points", 8.0, 10.0, "real"),
            num("horse_points", "pommel horse points", 8.0, 10.0, "real"),
            num("total_points", "total points", 50.0, 60.0, "real"))),
    )),
    Schema("flight_company", (
        Table("airline", "airline", "airlines", 14, (
            pk("airline_id"), label("name", "org", "name", "Airways", "Air", "Airlines"),
            cat("country", "country", *NATIONS[:6]), num("founded", "founding year", 1930, 2010, "year"))),
        Table("airport", "airport", "airports", 18, (
            pk("airport_id"), label("name", "place", "name", "International", "Airfield"),
            cat("city", "city", *CITIES), num("elevation", "elevation", 0, 2500))),
        Table("flight", "flight", "flights", 150, (
            pk("flight_id"), label("flight_no", "code", "flight number"),
            fk("airline_id", "airline", "airline"), fk("source_airport", "airport", "departure airport"),
            fk("dest_airport", "airport", "arrival airport"), num("distance", "distance", 200, 9000),
            num("price", "price", 49, 1500, "real"))),
    )),
    Schema("pets", (
        Table("owner", "owner", "owners", 30, (
            pk("owner_id"), label("name", "person"), cat("city", "city", *CITIES[:9]),
            num("age", "age", 18, 80))),
        Table("pet", "pet", "pets", 60, (
            pk("pet_id"), label("pet_name", "pet", "pet name"), fk("owner_id", "owner", "owner"),
            cat("pet_type", "pet type", "dog", "cat", "bird", "rabbit", "hamster"),
            num("weight", "weight", 0.2, 40.0, "real"), num("pet_age", "age", 1, 15))),
        Table("vet_visit", "vet visit", "vet visits", 120, (
            pk("visit_id"), fk("pet_id", "pet", "pet"), num("cost", "cost", 20, 900, "real"),
            num("visit_year", "visit year", 2015, 2023, "year"),
            cat("reason", "reason", "checkup", "vaccine", "injury", "dental", "surgery"))),
    )),
    Schema("employee_hire", (
        Table("shop", "shop", "shops", 16, (
            pk("shop_id"), label("name", "org", "name", "Market", "Store", "Outlet"),
            cat("location", "location", *CITIES[6:13]), cat("district", "district", "North", "South", "East", "West", "Centre"),
            num("number_products", "number of products", 100, 20000))),
        Table("employee", "employee", "employees", 45, (
            pk("employee_id"), label("name", "person"), num("age", "age", 19, 64),
            cat("city", "city", *CITIES[:8]))),
        Table("hiring", "hiring", "hirings", 36, (
            fk("shop_id", "shop", "shop"), fk("employee_id", "employee", "employee"),
            num("start_year", "start year", 2005, 2023, "year"), cat("is_full_time", "full-time flag", *YES_NO))),
        Table("evaluation", "evaluation", "evaluations", 70, (
            pk("evaluation_id"), fk("employee_id", "employee", "employee"),
            num("year_awarded", "year awarded", 2010, 2023, "year"), num("bonus", "bonus", 500, 5000, "real"))),
    )),
    Schema("car_makers", (
        Table("maker", "maker", "makers", 15, (
            pk("maker_id"), label("name", "org", "name", "Motors", "Auto", "Cars"),
            cat("country", "country", *NATIONS[:6]), num("founded", "founding year", 1890, 1990, "year"))),
        Table("model", "model", "models", 40, (
            pk("model_id"), label("model_name", "title", "model name"), fk("maker_id", "maker", "maker"),
            cat("body_type", "body type", "sedan", "coupe", "wagon", "hatchback", "suv"))),
        Table("car", "car", "cars", 150, (
            pk("car_id"), fk("model_id", "model", "model"), num("mpg", "mpg", 10.0, 45.0, "real"),
            num("horsepower", "horsepower", 60, 400), num("cylinders", "cylinder count", 3, 8),
            num("year", "model year", 1970, 2020, "year"))),
    )),
    Schema("world", (
        Table("country", "country", "countries", 30, (
            pk("country_id"), label("name", "country"),
            cat("continent", "continent", "Europe", "Asia", "Africa", "Americas", "Oceania"),
            num("population", "population", 300000, 90000000),
            num("life_expectancy", "life expectancy", 50.0, 85.0, "real"))),
        Table("city", "city", "cities", 90, (
            pk("city_id"), label("name", "place", "name", "ville", "ton", "burg", "port"),
            fk("country_id", "country", "country"), num("population", "population", 5000, 5000000))),
        Table("countrylanguage", "language record", "language records", 80, (
            fk("country_id", "country", "country"),
            cat("language", "language", "English", "French", "Spanish", "Arabic", "Swahili", "Hindi"),
            cat("is_official", "official flag", *YES_NO), num("percentage", "percentage", 1.0, 99.0, "real"))),
    )),
    # The unseen domains: never in train or test_seen.
    Schema("orchestra", (
        Table("conductor", "conductor", "conductors", 20, (
            pk("conductor_id"), label("name", "person"), num("age", "age", 30, 80),
            cat("nationality", "nationality", *NATIONS[3:9]), num("year_of_work", "years of work", 1, 40))),
        Table("orchestra", "orchestra", "orchestras", 25, (
            pk("orchestra_id"), label("name", "org", "name", "Philharmonic", "Symphony", "Ensemble"),
            fk("conductor_id", "conductor", "conductor"),
            cat("record_company", "record company", "Decca", "Sony", "EMI", "Naxos"),
            num("year_founded", "founding year", 1850, 2010, "year"))),
        Table("performance", "performance", "performances", 70, (
            pk("performance_id"), fk("orchestra_id", "orchestra", "orchestra"),
            cat("type", "type", "Live", "Studio", "Broadcast", "Festival"),
            num("share", "share", 1.0, 40.0, "real"), num("official_ratings", "official ratings", 1000, 90000))),
    )),
    Schema("museum_visit", (
        Table("museum", "museum", "museums", 15, (
            pk("museum_id"), label("name", "place", "name", "Museum", "Gallery"),
            num("num_of_staff", "number of staff", 5, 400), num("open_year", "opening year", 1900, 2015, "year"),
            cat("city", "city", *CITIES[:6]))),
        Table("visitor", "visitor", "visitors", 40, (
            pk("visitor_id"), label("name", "person"), num("level_of_membership", "membership level", 1, 8),
            num("age", "age", 12, 85))),
        Table("visit", "visit", "visits", 80, (
            fk("museum_id", "museum", "museum"), fk("visitor_id", "visitor", "visitor"),
            num("num_of_ticket", "number of tickets", 1, 20), num("total_spent", "total spent", 5, 600, "real"))),
    )),
    Schema("book_press", (
        Table("book", "book", "books", 40, (
            pk("book_id"), label("title", "title", "title"),
            cat("writer", "writer", "Mo Hale", "Ria Sen", "Tom Ueda", "Una Voss", "Val Wu"),
            cat("genre", "genre", "mystery", "fantasy", "history", "poetry"), num("issues", "number of issues", 1, 40))),
        Table("press", "publisher", "publishers", 14, (
            pk("press_id"), label("name", "org", "name", "Press", "Books", "House"),
            cat("city", "city", *CITIES[8:14]), num("founded", "founding year", 1880, 2010, "year"))),
        Table("publication", "publication", "publications", 80, (
            pk("publication_id"), fk("book_id", "book", "book"), fk("press_id", "press", "publisher"),
            num("publication_year", "publication year", 1990, 2023, "year"), num("price", "price", 4, 80, "real"))),
    )),
    Schema("soccer_club", (
        Table("club", "club", "clubs", 16, (
            pk("club_id"), label("name", "org", "name", "FC", "United", "Rovers", "City"),
            cat("region", "region", "North", "South", "Coast", "Valley", "Capital"),
            num("start_year", "founding year", 1870, 1990, "year"))),
        Table("player", "player", "players", 90, (
            pk("player_id"), label("name", "person"), fk("club_id", "club", "club"),
            cat("position", "position", "Goalkeeper", "Defender", "Midfielder", "Forward"),
            num("apps", "appearances", 0, 300), num("goals", "goals", 0, 120))),
        Table("coach", "coach", "coaches", 20, (
            pk("coach_id"), label("name", "person"), fk("club_id", "club", "club"),
            num("rank", "rank", 1, 10), cat("licence", "licence", "A", "B", "Pro"))),
    )),
)  # fmt: skip

UNSEEN: frozenset[str] = frozenset({"orchestra", "museum_visit", "book_press", "soccer_club"})
