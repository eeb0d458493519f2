#!/usr/bin/env python3
"""A computer-use loop: screenshot -> decide -> act, until a form is filled.

    python3 examples/computer_use.py [--template desktop] [--out final.png]

A sign-up form is served inside a desktop sandbox and opened in Chromium.
Then the loop runs: take a screenshot, let a "model" decide the next
action from the pixels alone, do it with sbx.desktop, repeat. The model
here is scripted (ScriptedModel.decide): an empty field has a coloured
border (red for the name, blue for the email; grey once filled), the
submit button is orange, and the page turns green once submitted. Replace
decide() with a call to your computer-use model (send it the PNG, map its
answer to sbx.desktop's actions) and the rest stays. Uses the `desktop`
template (sudo scripts/build-template.sh desktop). See docs/desktop.md.
Needs the agentbox SDK (pip install ./sdk/python, or PYTHONPATH=sdk/python)
and a daemon (AGENTBOX_HOST / AGENTBOX_API_KEY, or root on its host).
"""

import argparse
import sys
import time

from agentbox import PNGImage, Sandbox
from agentbox.errors import AgentboxError

FORM = """<!doctype html>
<html><head><meta charset="utf-8"><title>sign up</title>
<style>
  body { margin: 40px; font: 20px sans-serif; background: #fff; }
  input { display: block; width: 420px; height: 36px; font-size: 18px;
          margin: 10px 0 30px; border: 5px solid; outline: none; }
  #name:placeholder-shown { border-color: rgb(230, 0, 0); }
  #email:placeholder-shown { border-color: rgb(0, 0, 230); }
  input:not(:placeholder-shown) { border-color: rgb(128, 128, 128); }
  button { width: 200px; height: 60px; border: 0; font-size: 20px;
           background: rgb(255, 140, 0); }
  body.done { background: rgb(0, 170, 0); }
</style></head>
<body>
<label>Name <input id="name" placeholder=" " autocomplete="off"></label>
<label>Email <input id="email" placeholder=" " autocomplete="off"></label>
<button id="go">Sign up</button>
<script>
  document.getElementById('go').onclick = () => {
    const n = document.getElementById('name').value;
    const e = document.getElementById('email').value;
    if (n && e) {
      document.body.className = 'done';
      document.title = 'submitted:' + n + ' <' + e + '>';
    }
  };
</script>
</body></html>
"""

RED, BLUE, ORANGE, GREEN = (230, 0, 0), (0, 0, 230), (255, 140, 0), (0, 170, 0)
PORT = 8090
SCALE = 2  # the model sees screenshots at 1/SCALE of the screen's size


class ScriptedModel:
    """Decides the next action from a screenshot, as a computer-use model
    would; this one reads the form's colours. It sees screenshots at half
    size (SCALE), as models are usually sent, and answers in screen
    pixels."""

    def __init__(self, name, email):
        self.values = {"name": name, "email": email}
        self.typed = {}  # field -> how many times it was typed
        self.waited = 0

    def decide(self, img):
        """Return (why, [actions]) or (why, None) when the task is done."""
        def at(box):
            return (box[0] + box[2]) // 2 * SCALE, (box[1] + box[3]) // 2 * SCALE

        done = img.find(GREEN)
        if done and done[2] - done[0] > img.width // 4:
            return "the page is green: submitted", None
        for colour, field in ((RED, "name"), (BLUE, "email")):
            box = img.find(colour)
            if not box:
                continue
            x, y = at(box)
            tries = self.typed.get(field, 0)
            if tries and self.waited < 5:
                self.waited += 1
                return f"the {field} field still looks empty; waiting", [{"type": "wait", "ms": 200}]
            # First try, or the text did not arrive: click the field (which
            # also gives the browser's window the focus), let the click
            # land, clear what is there and type.
            self.typed[field] = tries + 1
            self.waited = 0
            return f"the {field} field is empty at {x},{y} (try {tries + 1})", [
                {"type": "click", "x": x, "y": y},
                {"type": "wait", "ms": 100},
                {"type": "key", "keys": "ctrl+a"},
                {"type": "type", "text": self.values[field]},
            ]
        box = img.find(ORANGE)
        if box and len(self.typed) == 2:
            x, y = at(box)
            return f"every field is filled; the button is at {x},{y}", [{"type": "click", "x": x, "y": y},
                                                                        {"type": "wait", "ms": 200}]
        return "nothing to do yet (the page is loading)", [{"type": "wait", "ms": 200}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--template", default="desktop")
    ap.add_argument("--out", default="final.png")
    ap.add_argument("--max-steps", type=int, default=40)
    args = ap.parse_args()
    name, email = "Ada Lovelace", "ada@example.org"

    try:
        sbx = Sandbox.create(template=args.template, memory_mb=2048, ttl_seconds=600)
    except AgentboxError as e:
        sys.exit(f"computer_use: {e}\nBuild and import the desktop template with: "
                 "sudo scripts/build-template.sh desktop")
    with sbx:
        t0 = time.monotonic()
        sbx.desktop.start(width=1024, height=768)
        print(f"desktop ready in {time.monotonic() - t0:.2f}s")
        sbx.files.write("/tmp/site/form.html", FORM)
        sbx.start(["python3", "-m", "http.server", str(PORT), "--bind", "127.0.0.1", "--directory", "/tmp/site"])
        url = f"http://127.0.0.1:{PORT}/form.html"
        r = sbx.exec(f"for i in $(seq 300); do python3 -c \"import urllib.request; urllib.request.urlopen('{url}')\" "
                     "2>/dev/null && exit 0; sleep 0.1; done; exit 1")
        if r.exit_code != 0:
            sys.exit(f"computer_use: the form's server did not start: {r.stderr}")
        sbx.desktop.open(url)

        model = ScriptedModel(name, email)
        img = PNGImage.decode(sbx.desktop.screenshot(scale=1 / SCALE))
        for step in range(1, args.max_steps + 1):
            why, actions = model.decide(img)
            print(f"step {step}: {why}")
            if actions is None:
                break
            # The actions and the next screenshot in one round trip. The
            # page may take a moment to react: the next decide() sees it.
            res = sbx.desktop.actions(actions, screenshot={"scale": 1 / SCALE})
            img = PNGImage.decode(res.screenshot)
        else:
            with open(args.out, "wb") as f:
                f.write(sbx.desktop.screenshot())
            sys.exit(f"computer_use: not done after {args.max_steps} steps; last screenshot: {args.out}")

        # The window's title follows the page's paint a moment later.
        deadline = time.monotonic() + 30
        titles = []
        while not titles and time.monotonic() < deadline:
            titles = [w.title for w in sbx.desktop.windows() if w.title.startswith("submitted:")]
            if not titles:
                time.sleep(0.1)
        print(f"window title: {titles[0] if titles else '(none)'}")
        with open(args.out, "wb") as f:
            f.write(sbx.desktop.screenshot())
        print(f"filled the form in {time.monotonic() - t0:.2f}s; final screenshot: {args.out}")
        if not titles or titles[0].split(" - ")[0] != f"submitted:{name} <{email}>":
            sys.exit("computer_use: the page did not get what was typed")


if __name__ == "__main__":
    main()
