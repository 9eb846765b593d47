"""The Chat's speed as the visitor lives it, measured in the page from the click.

The server can time a reply only from when its event reached it; the visitor waits from the
click, through the page's first request and the queue. A script in the page (`MEASURE`, run once
on page load) notes the moment of each click that asks for a reply (Send, Enter in the message
box, an example chip, Retry, Continue), sees the reply's first token arrive and the reply end in
the turns table (`chat_tab.turns_html`, whose time cells carry the server's own figures as
`data-stream`), and writes into that reply's row the time to first token and tokens/s from the
click, with the server's figures beside them where they differ by more than 20 %. The table is
redrawn by every update, so the script keeps each reply's figures (by row, tokens and finish
reason) and writes them again after each redraw. A reply replayed by a link (no click) keeps the
server's figures. This module holds only that script.
"""

from __future__ import annotations

MEASURE = """() => {
  const figures = {};  // "row|tokens|finish" -> {first: s, rate: tok/s}
  let click = null, first = null;
  const asks = '#chat-send, #chat-retry, #chat-continue, #chat-conversation button.example';
  document.addEventListener('click', (e) => {
    if (e.target.closest && e.target.closest(asks)) { click = performance.now(); first = null; }
  }, true);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && e.target.closest && e.target.closest('#chat-message')) {
      click = performance.now(); first = null;
    }
  }, true);
  const shown = (value, stream, digits) => {
    const mine = value.toFixed(digits);
    const differs = stream > 0 && Math.abs(stream - value) > 0.2 * value;
    return differs ? `${mine} (server ${stream.toFixed(digits)})` : mine;
  };
  const keyOf = (i, cells) => `${i}|${cells[2].textContent}|${cells[5].textContent.trim()}`;
  const update = () => {
    const rows = [...document.querySelectorAll('#chat-turns tbody tr')];
    const last = rows[rows.length - 1];
    if (click !== null && last && last.children[1].textContent === 'assistant') {
      const cells = last.children, tokens = Number(cells[2].textContent);
      if (first === null && tokens > 0) first = performance.now();
      const finish = cells[5].textContent.trim();
      if (first !== null && finish !== '' && finish !== 'running') {
        const seconds = (performance.now() - click) / 1000;
        figures[keyOf(rows.length - 1, cells)] = {
          first: (first - click) / 1000, rate: seconds > 0 ? tokens / seconds : 0};
        click = null;
      }
    }
    rows.forEach((row, i) => {
      const cells = row.children, figure = figures[keyOf(i, cells)];
      if (!figure) return;
      const texts = [
        shown(figure.first, Number(cells[3].dataset.stream), 3),
        shown(figure.rate, Number(cells[4].dataset.stream), 1)];
      [3, 4].forEach((n, j) => {
        if (cells[n].textContent !== texts[j]) {
          cells[n].textContent = texts[j];
          cells[n].classList.add('from-click');
        }
      });
    });
  };
  new MutationObserver(update).observe(document.body,
    {subtree: true, childList: true, characterData: true});
}"""
