// Chorus prompt wording (defaults as in persMEM's Chorus; editable in settings) and reply matching.

export const DEFAULT_CHORUS_TEMPLATE =
  "[CHORUS] {message}\n\nAfter processing, write your key thoughts/analysis to AMQ " +
  "(amq_send to the other instance; you are the sender) so they can read and respond. Then answer normally.";

export const DEFAULT_CHECK_TEMPLATE =
  "[AMQ-CHECK] Check your AMQ inbox (amq_check). Read and respond to any messages from the other " +
  "instance via amq_send. If no new messages, reply with: No new AMQ messages.";

/** Round 0: the user's message wrapped in the [CHORUS] instruction. */
export function wrapChorus(message, template = DEFAULT_CHORUS_TEMPLATE) {
  const text = String(message ?? "").trim();
  if (!text) throw new Error("the message is empty");
  return template.includes("{message}") ? template.split("{message}").join(text) : `${template} ${text}`;
}

/** Rounds 1..N: the [AMQ-CHECK] prompt. */
export function amqCheckPrompt(template = DEFAULT_CHECK_TEMPLATE) {
  return template;
}

const NO_NEW = /\bno\s+(new\s+)?(amq\s+)?messages?\b|\binbox\s+is\s+empty\b|\bnothing\s+new\b/i;

/** Fallback when the server cannot be asked: does the end of a reply say "No new AMQ messages"? */
export function saysNoNewMessages(snippet) {
  return NO_NEW.test(String(snippet ?? "").slice(-500));
}
