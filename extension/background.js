// Chorus background: its only job is to open the panel from the toolbar button. The exchange loop runs in the
// panel page (sidepanel.js), which lives as long as the panel is open, so it never depends on this script
// staying alive (Chromium stops an idle service worker; Firefox unloads an idle event page).
if (globalThis.chrome?.sidePanel?.setPanelBehavior) {
  // Chromium: the side panel opens on the toolbar button by itself, no click handler needed.
  chrome.sidePanel.setPanelBehavior({ openPanelOnActionClick: true }).catch((error) => {
    console.error("Chorus: could not make the toolbar button open the side panel:", error);
  });
} else if (globalThis.browser?.sidebarAction?.toggle) {
  // Firefox: toggle() counts as a user action only when called straight from the click handler, not after an
  // await, so the listener calls it synchronously. Registered at top level so the event page wakes for it.
  browser.action.onClicked.addListener(() => {
    browser.sidebarAction.toggle();
  });
}
