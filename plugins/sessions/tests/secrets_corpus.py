"""A corpus for redaction: real-looking secrets of each provider (fake: drawn at random in each provider's format,
so no real key is in this repository) in the contexts a session shows them in, and look-alikes that are not secrets
(git SHAs, UUIDs, digests, base64 of plain text, paths, identifiers) that must come through unchanged.

`secret_samples(seed)` draws a fresh set each time it is called with another seed; the tests use several seeds, so
a rule that only matches the one sample someone typed in does not pass."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid

UPPER_DIGITS = string.ascii_uppercase + string.digits
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
B64 = ALNUM + "+/"
HEX = "0123456789abcdef"
PUNCT_PASSWORD = ALNUM + "!#$%,;.-_"  # what a generated password holds, `#`, `,` and `;` included


def _draw(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(rng: random.Random) -> str:
    header = {"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
    payload = {"sub": str(rng.randrange(10**6)), "iat": 1700000000 + rng.randrange(10**7),
               "email": f"user{rng.randrange(999)}@example.com", "scope": rng.choice(["read", "read write", "admin"])}
    signature = bytes(rng.randrange(256) for _ in range(rng.choice([32, 64, 256])))
    return ".".join([_b64url(json.dumps(header).encode()), _b64url(json.dumps(payload).encode()), _b64url(signature)])


def _pem(rng: random.Random, label: str, lines: int) -> tuple[str, str]:
    body = [base64.b64encode(bytes(rng.randrange(256) for _ in range(48))).decode() for _ in range(lines)]
    return f"-----BEGIN {label}-----\n" + "\n".join(body) + f"\n-----END {label}-----", body[1]


def _password(rng: random.Random, n: int = 18) -> str:
    """A password such as a generator makes, with at least one of `#`, `,`, `;` inside (not first: a .env value
    starting with `#` is a comment)."""
    core = _draw(rng, PUNCT_PASSWORD, n)
    cut = rng.randrange(2, n - 2)
    return core[:cut] + rng.choice("#,;") + core[cut:] + rng.choice(ALNUM)


def secret_samples(seed: int) -> list[tuple[str, str, str, str]]:
    """(provider, kind the mark must name, text as a session shows it, the secret that must be gone)."""
    rng = random.Random(seed)
    d = lambda alphabet, n: _draw(rng, alphabet, n)  # noqa: E731
    samples: list[tuple[str, str, str, str]] = []

    def add(provider, kind, text, secret):
        assert secret in text
        samples.append((provider, kind, text, secret))

    # -- what issue 32 named ------------------------------------------------------------------------------------
    token = _jwt(rng)
    add("jwt", "jwt", f"the login answer was {token} and it expires in an hour", token)
    token = _jwt(rng)
    add("jwt in Cookie", "jwt", f"curl -H 'Cookie: theme=dark; session={token}; lang=en' https://app.example.com/me", token)
    token = _jwt(rng)
    add("jwt in Set-Cookie", "jwt", f"< Set-Cookie: access_token={token}; Path=/; HttpOnly; Secure", token)
    token = d(URLSAFE, 43)
    add("session cookie", "cookie", f"Cookie: sessionid={token}; csrftoken=abc", token)
    key = d(HEX, 32)
    add("api_key first query parameter", "assignment",
        f"GET https://api.openweathermap.org/data/2.5/weather?api_key={key}&q=London HTTP/1.1", key)
    key = d(ALNUM, 40)
    add("access_token first query parameter", "assignment",
        f"curl 'https://graph.example.com/v19.0/me?access_token={key}&fields=id,name'", key)
    key = d(ALNUM, 32)
    add("token query parameter in JSON", "assignment", f'{{"url": "https://hooks.example.net/in?token={key}"}}', key)
    password = _password(rng)
    add(".env value with # , ;", "assignment", f"# staging\nDB_PASSWORD={password}\nDB_USER=ledger\n", password)
    password = _password(rng)
    add("export with # , ;", "assignment", f"export SMTP_PASSWORD={password} # rotated friday", password)
    token = "npm_" + d(ALNUM, 36)
    add(".npmrc npm_ token", "npm_token", f"registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken={token}\n",
        token)
    token = str(uuid.UUID(int=rng.getrandbits(128)))
    add(".npmrc legacy uuid token", "npm_token", f"//registry.npmjs.org/:_authToken={token}", token)
    token = d(B64, 64) + "=="
    add(".npmrc other registry", "npm_token", f"//pkgs.dev.azure.com/org/_packaging/feed/npm/registry/:_authToken={token}",
        token)
    key = base64.b64encode(bytes(rng.randrange(256) for _ in range(64))).decode()
    add("azure storage AccountKey", "azure_storage_key",
        f"AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=ledgerprod;AccountKey={key};"
        "EndpointSuffix=core.windows.net", key)
    token = "hf_" + d(string.ascii_letters, 34)
    add("hugging face token", "huggingface_token", f"huggingface-cli login --token {token}", token)
    token = "hf_" + d(string.ascii_letters, 34)
    add("hugging face token bare", "huggingface_token", f"from_pretrained(name, token='{token}')", token)
    token = "pypi-AgEIcHlwaS5vcmc" + d(URLSAFE, 160)
    add("pypi token", "pypi_token", f"[pypi]\n  username = __token__\n  password = {token}\n", token)
    token = "pypi-AgEIcHlwaS5vcmc" + d(URLSAFE, 140)
    add("pypi token in twine", "pypi_token", f"twine upload -u __token__ -p {token} dist/*", token)
    token = "SG." + d(URLSAFE, 22) + "." + d(URLSAFE, 43)
    add("sendgrid key", "sendgrid_key", f"sg = SendGridAPIClient('{token}')", token)
    password = d(ALNUM + "!%", 14)
    add("mysql -pSECRET", "mysql_password", f"mysql -u root -p{password} -h 127.0.0.1 ledger < dump.sql", password)
    password = d(ALNUM, 16)
    add("mysqldump -p'SECRET'", "mysql_password", f"mysqldump -uroot -p'{password}' --single-transaction ledger", password)
    password = d(ALNUM, 12)
    add("mariadb -pSECRET", "mysql_password", f"docker exec db mariadb -uapp -p{password} -e 'show tables'", password)

    # -- the common ones ----------------------------------------------------------------------------------------
    key = rng.choice(["AKIA", "ASIA"]) + d("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    add("aws access key id", "aws_access_key", f"aws_access_key_id = {key}", key)
    secret = d(B64, 40)
    add("aws secret in credentials file", "aws_secret_key", f"[default]\naws_secret_access_key = {secret}\n", secret)
    secret = d(B64, 40)
    add("aws secret in JSON", "aws_secret_key", f'"SecretAccessKey": "{secret}",', secret)
    token = rng.choice(["ghp_", "gho_", "ghs_", "ghu_"]) + d(ALNUM, 36)
    add("github classic token", "github_token", f"git remote set-url origin https://{token}@github.com/acme/api.git",
        token)
    token = "github_pat_" + d(ALNUM, 22) + "_" + d(ALNUM, 59)
    add("github fine-grained token", "github_token", f"GH_TOKEN: {token}", token)
    token = "glpat-" + d(URLSAFE, 20)
    add("gitlab token", "gitlab_token", f"curl --header 'PRIVATE-TOKEN: {token}' https://gitlab.example.com/api/v4/projects",
        token)
    token = f"xoxb-{d('0123456789', 12)}-{d('0123456789', 13)}-{d(ALNUM, 24)}"
    add("slack bot token", "slack_token", f"SLACK_BOT {token}", token)
    token = f"xapp-1-A{d(UPPER_DIGITS, 10)}-{d('0123456789', 13)}-{d(HEX, 64)}"
    add("slack app token", "slack_token", f"socket mode with {token}", token)
    hook = f"https://hooks.slack.com/services/T{d(UPPER_DIGITS, 8)}/B{d(UPPER_DIGITS, 10)}/{d(ALNUM, 24)}"
    add("slack webhook", "slack_webhook", f"post the alert to {hook}", hook.rsplit("/", 1)[1])
    key = "sk_live_51" + d(ALNUM, 97)
    add("stripe live key", "stripe_key", f"Stripe.api_key = {key}", key)
    key = "rk_live_51" + d(ALNUM, 97)
    add("stripe restricted key", "stripe_key", f"restricted {key}", key)
    key = "sk_test_51" + d(ALNUM, 97)
    add("stripe test key", "stripe_key", f"stripe listen --api-key {key}", key)
    secret = "whsec_" + d(ALNUM, 32)
    add("stripe webhook secret", "stripe_key", f"Ready! Your webhook signing secret is {secret} (^C to quit)", secret)
    key = "sk-proj-" + d(URLSAFE, 74) + "T3BlbkFJ" + d(URLSAFE, 74)
    add("openai project key", "openai_key", f"client = OpenAI(api_key={key!r})", key)
    key = "sk-" + d(ALNUM, 20) + "T3BlbkFJ" + d(ALNUM, 20)
    add("openai legacy key", "openai_key", f"openai.api_key = {key}", key)
    key = "sk-svcacct-" + d(URLSAFE, 60)
    add("openai service account key", "openai_key", f"use {key} for the batch job", key)
    key = "sk-ant-api03-" + d(URLSAFE, 93) + "AA"
    add("anthropic key", "anthropic_key", f"x-api-key: {key}", key)
    key = "sk-ant-admin01-" + d(URLSAFE, 93) + "AA"
    add("anthropic admin key", "anthropic_key", f"ANTHROPIC_ADMIN {key}", key)
    key = "AIza" + d(URLSAFE, 35)
    add("google api key", "google_api_key", f"https://maps.googleapis.com/maps/api/geocode/json?address=x&key={key}", key)
    block, line = _pem(rng, "RSA PRIVATE KEY", 6)
    add("rsa private key", "private_key", f"$ cat deploy.pem\n{block}\n$ ", line)
    block, line = _pem(rng, "OPENSSH PRIVATE KEY", 5)
    add("openssh private key", "private_key", block, line)
    block, line = _pem(rng, "EC PRIVATE KEY", 3)
    add("ec private key cut off", "private_key", block.rsplit("\n", 2)[0], line)
    password = d(ALNUM + "-_.~", 16)
    add("basic-auth url", "url_password", f"git clone https://deploy:{password}@git.example.com/acme/infra.git", password)
    password = d(ALNUM, 20)
    add("database url", "url_password", f"DATABASE_URL=postgres://ledger:{password}@db.internal:5432/ledger", password)
    token = d(URLSAFE, 40)
    add("bearer header", "authorization", f'curl -H "Authorization: Bearer {token}" https://api.example.com/v1/me', token)
    credentials = base64.b64encode(f"deploy:{d(ALNUM, 16)}".encode()).decode()
    add("basic auth header", "authorization", f"Authorization: Basic {credentials}", credentials)
    password = d(ALNUM, 16)
    add("password flag", "assignment", f"./manage.py createsuperuser --username admin --password {password}", password)
    key = d(HEX, 32)
    add("api-key flag", "assignment", f"datadog-agent check --api-key={key}", key)
    token = "pm_" + d(URLSAFE, 43)
    add("persmem token", "persmem_token", f"claude mcp add --header 'Authorization: X {token}'", token)

    # -- more shapes detect-secrets knows -------------------------------------------------------------------------
    token = f"glrt-{d(URLSAFE, 20)}"
    add("gitlab runner token", "gitlab_token", f"gitlab-runner register --token {token}", token)
    token = f"{d('0123456789', 10)}:AA{d(URLSAFE, 33)}"
    add("telegram bot token", "telegram_token", f"https://api.telegram.org/bot{token}/getMe", token)
    sid = "SK" + d(HEX, 32)
    add("twilio api key", "twilio_key", f"TWILIO key {sid}", sid)
    key = d(HEX, 32) + "-us" + str(rng.randrange(1, 21))
    add("mailchimp key", "mailchimp_key", f"mailchimp.set_config({{'api_key': '{key}'}})", key)
    secret = "sq0csp-" + d(URLSAFE, 43)
    add("square oauth secret", "square_oauth_secret", f"square secret {secret}", secret)
    token = rng.choice("MNO") + d(URLSAFE, 23) + "." + d(URLSAFE, 6) + "." + d(URLSAFE, 27)
    add("discord bot token", "discord_token", f"client.run('{token}')", token)
    return samples


def look_alikes(seed: int) -> list[str]:
    """Texts with no secret in them that look like some: each must come through redaction unchanged."""
    rng = random.Random(seed)
    d = lambda alphabet, n: _draw(rng, alphabet, n)  # noqa: E731
    sha = hashlib.sha1(str(seed).encode()).hexdigest()
    sha256 = hashlib.sha256(str(seed).encode()).hexdigest()
    uid = str(uuid.UUID(int=rng.getrandbits(128)))
    prose = "The reconciliation job runs nightly; it compares the ledger with the bank's statement and files a report."
    return [
        f"commit {sha}\nAuthor: Dev <dev@example.com>\nDate:   Tue Nov 4 10:12:00 2026 +0100\n\n    fix the importer",
        f"{sha[:7]} (HEAD -> main, origin/main) capture: send lines in batches",
        f"git rebase -i {sha[:12]}~3 && git push --force-with-lease origin feature/{sha[:8]}",
        f"Merge: {sha[:9]} {hashlib.sha1(sha.encode()).hexdigest()[:9]}",
        f"request_id={uid} session {uid} finished",
        f'{{"id": "{uid}", "parentUuid": "{str(uuid.UUID(int=rng.getrandbits(128)))}", "type": "user"}}',
        f"sha256:{sha256}",
        f"docker pull ghcr.io/acme/api@sha256:{sha256}",
        f'"integrity": "sha512-{base64.b64encode(hashlib.sha512(sha.encode()).digest()).decode()}"',
        f"{sha256}  dist/persmem-0.1.0.tar.gz",
        f"echo {base64.b64encode(prose.encode()).decode()} | base64 -d",
        base64.b64encode(json.dumps({"name": "ledger", "replicas": 3}).encode()).decode(),
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
        "/home/dev/.ssh/id_ed25519.pub", "~/.aws/credentials", "src/persmem_core/tokens.py:42: def issue_token(",
        "/var/lib/persmem/sessions/kite/ledger/claude-7f3c2a10.jsonl.gz",
        "C:\\Users\\dev\\AppData\\Roaming\\npm\\node_modules\\typescript\\lib\\tsc.js",
        "max_tokens: 4096", "TOKENIZERS_PARALLELISM=false", "input_tokens = 1200", "PASSWORD_MIN_LENGTH=12",
        "SECRET_ROTATION=true", "password: null", "the token bucket refills every second",
        "Bearer tokens expire after an hour", "docker login --password-stdin < token.txt",
        "gh auth login --with-token < token.txt", "--token-file /run/secrets/ci_token",
        "pip install scikit-learn sk-learn", "git checkout task-management-feature-branch-12345",
        "AKIA is the prefix of AWS access key ids", "see https://example.com/a:b@c",
        "git@github.com:acme/api.git", "ssh://git@gitlab.example.com:2222/acme/api.git",
        "https://user@example.com/path?page=2&sort=desc#top", "mailto:dev@example.com",
        "mysql -u root -p -h 127.0.0.1 ledger", "mysql --port 3306 -P 3306 -h db",
        "npm config get registry", "//registry.npmjs.org/:_authToken=${NPM_TOKEN}",
        "AccountName=ledgerprod;EndpointSuffix=core.windows.net", "DefaultEndpointsProtocol=https",
        "the hf_hub_download helper caches files", "pypi-simple index at https://pypi.org/simple/",
        "SG.Sessions.Tests: run the unit tests", "sessionStorage.getItem('theme')",
        "Cookie: theme=dark; lang=en", "Set-Cookie: lang=en; Path=/",
        f"    at Object.<anonymous> (/app/node_modules/jest-circus/build/utils.js:{rng.randrange(999)}:12)",
        "APFSContainerReference disk3 APFSVolumeGroup", "0x7ffd5fbff8a0 0xdeadbeef 0o755",
        "#4f46e5 rgb(79, 70, 229)", "2026-11-28T02:49:11.120Z 1764298151", "MAC 3c:22:fb:9a:10:4e",
        "def test_the_secret_is_replaced_and_counted(self, rule, text, secret):",
        "export PATH=/usr/local/bin:$PATH; export EDITOR=vim",
        "ConnectionRefusedError: [Errno 111] Connection refused", prose,
        f"Traceback (most recent call last):\n  File \"/work/app/{d(string.ascii_lowercase, 8)}.py\", line 12",
        "eyJ is how base64 of a JSON object starts",
        "kubectl get secret db-credentials -o jsonpath='{.data.password}'",
        "aws sts get-caller-identity --profile prod", "ACME_LOG_LEVEL=debug ./run.sh",
    ]
