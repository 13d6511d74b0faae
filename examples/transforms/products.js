// products.js: a monstache middleware script, as monstache users have
// them. The file exports a bare function: `this` is the document, ns is
// "database.collection", updateDesc the change's updateDescription (or
// undefined). Return an object to index it, true to index the document as
// it is, false/null/undefined to keep it out of the index (and delete it
// there). It is a search job with every default: collection and index
// "products", primary key "id" (added from _id).
module.exports = function (doc, ns, updateDesc) {
  if (doc.deleted) {
    return false;
  }
  if (!doc.price) {
    return true;
  }
  doc.priceWithTax = Math.round(doc.price * 120) / 100;
  delete doc.internalNotes;
  return doc;
};

// Not monstache: samples for `meilistream check` may hang on the function.
module.exports.samples = [
  { _id: 1, name: "Kettle", price: 25.5, internalNotes: "supplier B" },
  { _id: 2, name: "Gift card" },
  { _id: 3, name: "Old lamp", price: 10, deleted: true },
];
