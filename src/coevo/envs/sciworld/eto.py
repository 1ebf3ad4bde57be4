"""ETO's published ScienceWorld protocol: its task lists and per-type step budgets.

ETO (Song et al. 2024) publishes the tasks the agent papers train and evaluate on, in its
repository's `eval_agent/data/sciworld/`: `train_indices.json` (1,483 tasks), `dev_indices.json`
(194, the papers' seen test split), `test_indices.json` (211, unseen) as (task name, variation)
pairs, and `max_steps.json`, one step budget per task type. Its 24 task types leave out six of
the package's 30: the three inclined-plane types, both Mendelian-genetics types and
measure-melting-point-unknown-substance. The facts are copied here (its task names mapped to
the package's); the `eto` splits use them as they are.

Measured against scienceworld 1.2.3's own variation sets: `test_unseen` is the first 10 (or all,
when fewer) of each type's test variations and `test_seen` lies in the dev variations, but
`train` draws on train and dev alike: 357 of its 1,483 tasks are dev variations, and 54 of
those are in `test_seen` as well.

Each line below is a task type and its variations, `a-b` a range with both ends included.
"""

from __future__ import annotations

from functools import cache

ETO_NAMES = {
    "task-1-boil": "boil",
    "task-1-change-the-state-of-matter-of": "change-the-state-of-matter-of",
    "task-1-freeze": "freeze",
    "task-1-melt": "melt",
    "task-10-measure-melting-point-(known-substance)": "measure-melting-point-known-substance",
    "task-10-use-thermometer": "use-thermometer",
    "task-2-power-component": "power-component",
    "task-2-power-component-(renewable-vs-nonrenewable-energy)": "power-component-renewable-vs-nonrenewable-energy",
    "task-2a-test-conductivity": "test-conductivity",
    "task-2a-test-conductivity-of-unknown-substances": "test-conductivity-of-unknown-substances",
    "task-3-find-animal": "find-animal",
    "task-3-find-living-thing": "find-living-thing",
    "task-3-find-non-living-thing": "find-non-living-thing",
    "task-3-find-plant": "find-plant",
    "task-4-grow-fruit": "grow-fruit",
    "task-4-grow-plant": "grow-plant",
    "task-5-chemistry-mix": "chemistry-mix",
    "task-5-chemistry-mix-paint-(secondary-color)": "chemistry-mix-paint-secondary-color",
    "task-5-chemistry-mix-paint-(tertiary-color)": "chemistry-mix-paint-tertiary-color",
    "task-6-lifespan-(longest-lived)": "lifespan-longest-lived",
    "task-6-lifespan-(longest-lived-then-shortest-lived)": "lifespan-longest-lived-then-shortest-lived",
    "task-6-lifespan-(shortest-lived)": "lifespan-shortest-lived",
    "task-7-identify-life-stages-1": "identify-life-stages-1",
    "task-7-identify-life-stages-2": "identify-life-stages-2",
}
"""ETO's task name -> the scienceworld package's."""

MAX_STEPS = {
    "boil": 100,
    "change-the-state-of-matter-of": 80,
    "freeze": 80,
    "melt": 80,
    "measure-melting-point-known-substance": 120,
    "use-thermometer": 30,
    "power-component": 20,
    "power-component-renewable-vs-nonrenewable-energy": 30,
    "test-conductivity": 30,
    "test-conductivity-of-unknown-substances": 30,
    "find-animal": 15,
    "find-living-thing": 15,
    "find-non-living-thing": 15,
    "find-plant": 15,
    "grow-fruit": 60,
    "grow-plant": 30,
    "chemistry-mix": 60,
    "chemistry-mix-paint-secondary-color": 15,
    "chemistry-mix-paint-tertiary-color": 30,
    "lifespan-longest-lived": 10,
    "lifespan-longest-lived-then-shortest-lived": 12,
    "lifespan-shortest-lived": 10,
    "identify-life-stages-1": 30,
    "identify-life-stages-2": 30,
}
"""ETO's step budget per task type (`max_steps.json`)."""

_VARIATIONS = {
    "train": """
boil: 0-13
change-the-state-of-matter-of: 0-13
freeze: 0-13
melt: 0-13
measure-melting-point-known-substance: 0-2 4 6 8-9 11 13-15 18 22 29 37-40 42 44-47 49 51 54-55
    58-59 61 63-64 70-72 74-77 79 84-85 93-95 98-99 105 111-113 120-122 125-126 132-134 141-143
    148 150-151 154 158 160 162 164 167 172 174 176 178 182 189 194-195 198 200 204-205 208-209
    216-217 219-220 223 229-230 233-234 236 238 241 243-244 246 248 252 254-255 264 272 280 287
    293-295 301 305 310 313 316 319-320 324 326
use-thermometer: 2 7 22 24 42 45 49 59 61 63 68 72 77 81-82 86-87 89-92 95 97-100 102 105
    107-108 121 124 128 132-133 136 138 141-142 144 149 155-156 158 163 166 169-172 175 187-188
    190-193 197-198 202-203 205-206 208-210 212 214 216 219 221 224-225 228 231 234-235 237 243
    248 252 254 256 263 265 267 270 276 279 282 284 286 293 296 301 305 311 317 320 326 330 335
    337 343 347 353 359 361 366-368 370 381 389 391-392 398-399 401 404
power-component: 0-3 6-9
power-component-renewable-vs-nonrenewable-energy: 0-5 7 9
test-conductivity: 4 6 11 16 20 23 29-30 36 39 42 47 50 59 62 65 78 81 89 92 101 109-110 115
    117 121 123 133 145 147 154 159 163 181 186 188 192 197 211 215 217 225 228 230 238 247
    253-254 258 260 265 271 279 290 293-294 300 306 309 311 319 321 323 330-331 336 339 344 348
    359 362 368-369 371 377 390 394 396-397 401 407 412 415 417 420 423 427 444 456 459-461 465
    488-489 500 510 512 521 525 531 537 540-541 553 557 560 573 581 587 590 601 610 618 626 635
    647-648 665 673
test-conductivity-of-unknown-substances: 2 5 10-11 14-16 18 22 27 30 34-36 38 51 53-55 65 72 78
    81 83 85 91-93 98-99 101 106 110 114 118-119 121 124-125 130 132 134-135 138-139 143
    145-146 148 150 152-154 166 172 177-178 181-182 184-185 188-190 195-196 202 204 206 214 216
    231 235 240 242-244 247 250 258 261-262 273-274 279 281 289 299 302-303 312 314-315 323
    328-330 332 342 345 349 353 360 363 366 385-386 391 394 397-398 406 411 422 425-426 429 431
    438 441
find-animal: 0-4 6 8-10 13 17 19 21-26 28-29 31 34 36 39-40 42 45 47 49 53-56 60 62 67-69 71
    73-77 82-85 89-90 93 95-97 99-102 104 107-109 112-115 120-121 125 127-128 130 132 134-138
    140-141 143-144 147-148 151 153 156-158 161 164-167 170 174-175 177 179-182 188 193 195
    200-201 203 206 210 212 215-216 218-224
find-living-thing: 0 2-3 6-7 9-10 13 15-16 18-19 21 24 26-28 30 32 34-35 38 41-43 46-49 51
    57-58 60 63 66 68-72 74 76-78 81 84 86 88-91 94 98 100 102-103 106-108 110 114-122 124-125
    128-129 131-133 135-136 138 140-144 147 149-150 152-154 157-160 167 169 172 176-177 179-180
    183 185-188 193 199-201 203-204 206 209 213-214 216-217 219 222
find-non-living-thing: 0-2 4-5 7-8 10-14 16 18 21-23 25-27 30 32-34 36-49 51-53 55-56 58-64
    66-68 70 72-74 76 79-81 90 93 96-100 102-103 105 107 110-111 113-114 116 120 124 128
    131-132 135 139 147-148 150 153 156 160 162-163 167 169 171-172 175 179-184 188 195-196
    199-202 205-206 208 210 214-215 219 221-222 224
find-plant: 0-1 3 5 8-9 11 16-19 23-27 30 32-35 37 39-42 44 47 49-50 52 55-56 59-60 62-72 74
    76-78 81 83-92 94-95 98-100 102-106 108-109 114 116-118 121-124 128-129 131-133 135 137
    142-144 146-147 149 155 160 164-165 167 169 171 173 175-176 178 182 185 187 194 200 203
    205-206 208 211 214 217-219 221
grow-fruit: 0 2-3 5-6 8-21 23-25 27-29 31 33-37 39 42-43 45-50 52-53 55-58 60-61 64 66 68-69
    72-73 76 78 80 83 87 90-92
grow-plant: 0-62 64 66-67 70 72-76 78 80-81 83-86 89-92
chemistry-mix: 0-15
chemistry-mix-paint-secondary-color: 0-17
chemistry-mix-paint-tertiary-color: 0-17
lifespan-longest-lived: 0-61 63-64 67 70 72-80 82-84 86-87 90-92
lifespan-longest-lived-then-shortest-lived: 0-29 31-42 44-56 58-65 67 71-72 74-77 79-81 83-84
    88 91-92
lifespan-shortest-lived: 0-67 69 72 75-77 79-80 82-86 88 90-91
identify-life-stages-1: 0-5
identify-life-stages-2: 0-3
""",
    "test_seen": """
boil: 14-17 19-20
change-the-state-of-matter-of: 14-20
freeze: 14-20
melt: 14-20
measure-melting-point-known-substance: 253 280-281 286-287 292 299-300 325-326
use-thermometer: 284-285 291 314 358 360 364 378 384-385
power-component: 11-13
power-component-renewable-vs-nonrenewable-energy: 10 13-14
test-conductivity: 474 479 485 523 528 579 587 640 655 662
test-conductivity-of-unknown-substances: 313 352 376 386 389 394 409 413 418 448
find-animal: 159 173 176 188 193 211 213 216 218 221
find-living-thing: 161 180 186 202 206 209 214 216 218 221
find-non-living-thing: 150 158 179 184-185 187 192 198 209 214
find-plant: 154 164-165 175 177 179 181 203 206 209
grow-fruit: 62 65 68 71-72 80 84-85 88 90
grow-plant: 64-65 68 77-78 84-88
chemistry-mix: 16-23
chemistry-mix-paint-secondary-color: 18-26
chemistry-mix-paint-tertiary-color: 18-26
lifespan-longest-lived: 66 68 72-73 78 80 83-84 88 92
lifespan-longest-lived-then-shortest-lived: 64 66-69 72 78 80 85 87
lifespan-shortest-lived: 69-71 76 80 82 84-85 87 91
identify-life-stages-1: 6-8
identify-life-stages-2: 4-5
""",
    "test_unseen": """
boil: 21-29
change-the-state-of-matter-of: 21-29
freeze: 21-29
melt: 21-29
measure-melting-point-known-substance: 327-336
use-thermometer: 405-414
power-component: 15-19
power-component-renewable-vs-nonrenewable-energy: 15-19
test-conductivity: 675-684
test-conductivity-of-unknown-substances: 450-459
find-animal: 225-234
find-living-thing: 225-234
find-non-living-thing: 225-234
find-plant: 225-234
grow-fruit: 93-102
grow-plant: 93-102
chemistry-mix: 24-31
chemistry-mix-paint-secondary-color: 27-35
chemistry-mix-paint-tertiary-color: 27-35
lifespan-longest-lived: 93-102
lifespan-longest-lived-then-shortest-lived: 93-102
lifespan-shortest-lived: 93-102
identify-life-stages-1: 9-13
identify-life-stages-2: 6-9
""",
}


@cache
def variations(split: str) -> dict[str, tuple[int, ...]]:
    """ETO's task list of one of our splits: task type -> its variations, ascending."""
    listed: dict[str, list[int]] = {}
    name = ""
    for line in _VARIATIONS[split].strip().splitlines():
        if ":" in line:
            name, line = line.split(":")
            listed[name] = []
        for item in line.split():
            first, _, last = item.partition("-")
            listed[name].extend(range(int(first), int(last or first) + 1))
    return {k: tuple(sorted(v)) for k, v in listed.items()}
