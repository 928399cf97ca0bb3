// Chorus background: opens the side panel when the toolbar icon is clicked (Chromium). The exchange loop runs
// in the side panel page itself, so it does not depend on the service worker staying alive.
if (globalThis.chrome?.sidePanel?.setPanelBehavior) {
  chrome.sidePanel.setPanelBehavior({ openPanelOnActionClick: true }).catch(() => {});
}
