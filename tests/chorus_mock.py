"""Two mock AI chat pages for the Chorus tests: the DOM of a real chat UI (a contenteditable ProseMirror input,
a send button, a stop button while "streaming", replies appearing over time), and a mock assistant behind
them that really calls the persmem server's AMQ tools as its agent."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Mock chat {agent}</title></head>
<body><main>
<div data-testid="chat-message-list" id="log"></div>
{input}
{button}
{stop}
</main>
<script>
const AGENT = {agent_json}, PAUSE = {pause}, HANG = {hang};
const log = document.getElementById("log");
const input = document.getElementById("input");
const send = document.getElementById("send");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
send.addEventListener("click", async () => {{
  const text = input.innerText.trim();
  if (!text) return;
  const user = document.createElement("div"); user.className = "user"; user.textContent = text; log.append(user);
  input.innerText = ""; input.setAttribute("contenteditable", "false"); send.disabled = true;
  const stop = document.createElement("button"); stop.dataset.testid = "stop-button"; stop.textContent = "Stop";
  document.querySelector("main").append(stop);
  const answer = await (await fetch("/assistant/" + AGENT, {{method: "POST", body: text}})).json();
  const reply = document.createElement("div"); reply.className = "assistant"; log.append(reply);
  const words = answer.reply.split(" ");
  for (let i = 0; i < words.length; i++) {{
    reply.textContent += (i ? " " : "") + words[i];
    await sleep(40);
    if (PAUSE && i === Math.floor(words.length / 2)) await sleep(PAUSE);  // a tool call mid-reply
  }}
  if (HANG) return;  // streams forever as far as the page shows
  stop.remove(); input.setAttribute("contenteditable", "true"); send.disabled = false;
}});
</script></body></html>"""

NORMAL_INPUT = '<div contenteditable="true" class="ProseMirror" id="input"></div>'
CHANGED_INPUT = '<div contenteditable="true" id="input"></div>'  # the primary selector no longer matches
NORMAL_BUTTON = '<button aria-label="Send Message" id="send">Send</button>'
CHANGED_BUTTON = '<button aria-label="Send" id="send">Send</button>'
SHOWN_STOP = '<button data-testid="stop-button" id="shown-stop">Stop</button>'  # a page caught mid-reply


class MockChat:
    """Serves /chat/<agent>?variant=changed&pause=ms&hang=1&showstop=1 and answers /assistant/<agent> through
    persmem. showstop=1 shows a stop button from the start, so "Check this tab" finds a streaming indicator."""

    def __init__(self, persmem, call_tool):
        self.persmem = persmem
        self.call_tool = call_tool  # (tool, args, agent) -> result
        self.prompts: dict[str, list[str]] = {"kite": [], "wren": []}
        mock = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, code, body, ctype):
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                url = urlparse(self.path)
                agent = url.path.rsplit("/", 1)[-1]
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                changed = q.get("variant") == "changed"
                page = PAGE.format(agent=agent, agent_json=json.dumps(agent), pause=int(q.get("pause", 0)),
                                   hang="true" if q.get("hang") else "false",
                                   input=CHANGED_INPUT if changed else NORMAL_INPUT,
                                   button=CHANGED_BUTTON if changed else NORMAL_BUTTON,
                                   stop=SHOWN_STOP if q.get("showstop") else "")
                self.reply(200, page, "text/html; charset=utf-8")

            def do_POST(self):  # noqa: N802
                agent = self.path.rsplit("/", 1)[-1]
                text = self.rfile.read(int(self.headers["Content-Length"])).decode()
                mock.prompts.setdefault(agent, []).append(text)
                self.reply(200, json.dumps({"reply": mock.assistant(agent, text)}), "application/json")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def assistant(self, agent: str, prompt: str) -> str:
        other = "wren" if agent == "kite" else "kite"
        if prompt.startswith("[CHORUS]"):
            question = prompt[len("[CHORUS]"):].split("\n\n")[0].strip()
            self.call_tool("amq_send", {"to_agent": other, "subject": f"Chorus: {question[:40]}",
                                        "body": f"{agent}'s analysis of: {question}"}, agent)
            return f"I wrote my analysis to {other} via AMQ. My answer to '{question}' is yes, with care."
        if prompt.startswith("[AMQ-CHECK]"):
            inbox = self.call_tool("amq_check", {"agent": agent}, agent)["messages"]
            if not inbox:
                return "No new AMQ messages."
            replied = 0
            for header in inbox:
                message = self.call_tool("amq_read", {"agent": agent, "msg_id": header["id"]}, agent)
                if message["subject"].count("Re:") < 2:  # the conversation ends after two replies
                    self.call_tool("amq_reply", {"msg_id": message["id"], "body": f"{agent} answers {message['from']}",
                                                 "subject": "Re: " + message["subject"]}, agent)
                    replied += 1
            return f"I read {len(inbox)} AMQ message(s) and replied to {replied}."
        return "I am a mock assistant."

    def stop(self):
        self.server.shutdown()


def drain(call_tool):
    """Empty both inboxes so each scenario starts clean."""
    for agent in ("kite", "wren"):
        for m in call_tool("amq_check", {}, agent)["messages"]:
            call_tool("amq_read", {"agent": agent, "msg_id": m["id"]}, agent)
